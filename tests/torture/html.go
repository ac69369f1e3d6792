package torture

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"slices"
	"time"
)

// Layout of the timeline picture, in SVG user units.
const (
	svgLeft   = 70 // room for the worker names
	svgWidth  = 1100
	svgRowH   = 22
	svgTop    = 30 // room for the fault labels
	svgBottom = 30 // room for the time axis
)

// palette colours the workers' bars, in turn.
var palette = []string{"#4e79a7", "#59a14f", "#9c755f", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#bab0ac"}

// WriteHTML writes the report as one self-contained HTML page (see the
// function WriteHTML).
func (r *Report) WriteHTML(w io.Writer) error {
	title := r.Title
	if title == "" {
		title = "dsync check"
	}
	return WriteHTML(w, title, r)
}

// WriteHTML writes reports as one self-contained HTML page (no script, no
// external resource). For each report: the checks, then a timeline with
// one row per worker, a bar for each hold from its grant to the end of its
// validity (outlined red if one of its writes was rejected, hatched where
// its holder was still at work past it), and the faults as shaded spans
// across the rows.
func WriteHTML(w io.Writer, title string, reports ...*Report) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>%s</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
pre{background:#f6f6f6;padding:1em;overflow-x:auto}
.ok{color:#2a7d2a}.fail{color:#b00020;font-weight:bold}
td,th{padding:2px 10px;text-align:left;vertical-align:top}
</style></head><body>
<h1>%s</h1>
`, html.EscapeString(title), html.EscapeString(title))
	for _, r := range reports {
		if len(reports) > 1 || r.Title != title {
			fmt.Fprintf(&b, "<h2>%s</h2>\n", html.EscapeString(r.Title))
		}
		r.writeSection(&b)
	}
	b.WriteString("</body></html>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func (r *Report) writeSection(b *bytes.Buffer) {
	verdict := `<p class="ok">Every check passed.</p>`
	if !r.OK() {
		verdict = fmt.Sprintf(`<p class="fail">Violations found: %s</p>`, html.EscapeString(fmt.Sprint(r.Failed())))
	}
	b.WriteString(verdict)
	b.WriteString("<table><tr><th>check</th><th>result</th><th>details</th></tr>\n")
	for _, res := range r.Results {
		status, class := "ok", "ok"
		details := res.Notes
		switch {
		case res.Skipped != "":
			status, class, details = "skipped", "", []string{res.Skipped}
		case !res.OK():
			status, class = fmt.Sprintf("FAIL (%d)", res.Count()), "fail"
			details = append(slices.Clone(res.Violations), res.Notes...)
		}
		fmt.Fprintf(b, `<tr><td>%s</td><td class="%s">%s</td><td>`, res.Name, class, status)
		for i, d := range details {
			if i > 0 {
				b.WriteString("<br>")
			}
			b.WriteString(html.EscapeString(d))
		}
		b.WriteString("</td></tr>\n")
	}
	b.WriteString("</table>\n<h3>Holders over time</h3>\n")
	r.writeSVG(b)
	b.WriteString("\n<h3>Report</h3>\n<pre>")
	var text bytes.Buffer
	r.WriteText(&text)
	b.WriteString(html.EscapeString(text.String()))
	b.WriteString("</pre>\n")
}

func (r *Report) writeSVG(b *bytes.Buffer) {
	h := r.History
	start, end := h.Start, h.End
	for _, sp := range r.Spans {
		if sp.Began > 0 && sp.Began < start {
			start = sp.Began
		}
		end = max(end, sp.Healed)
	}
	span := max(end-start, time.Millisecond)
	x := func(t time.Duration) float64 {
		return svgLeft + float64(t-start)/float64(span)*svgWidth
	}
	rows := map[int]int{}
	for i, m := range r.Members {
		rows[m.Worker] = i
	}
	height := svgTop + len(r.Members)*svgRowH + svgBottom
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-size="11">`+"\n", svgLeft+svgWidth+20, height)
	b.WriteString(`<defs><pattern id="stale" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#b00020" opacity="0.5"/></pattern></defs>` + "\n")
	// Faults first, under the bars.
	for i, sp := range r.Spans {
		from, to := sp.Began, sp.Healed
		if from == 0 {
			from = sp.Injected
		}
		if to == 0 {
			to = end
		}
		w := max(x(to)-x(from), 2)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e15759" opacity="0.18"><title>%s</title></rect>`+"\n",
			x(from), svgTop-4, w, len(r.Members)*svgRowH+8, html.EscapeString(spanTitle(sp, start)))
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#b00020">%s</text>`+"\n", x(from), 10+12*(i%2), html.EscapeString(sp.Name()))
	}
	for i, m := range r.Members {
		y := svgTop + i*svgRowH
		label := m.ID
		if m.Died > 0 {
			label += " †"
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" stroke-width="2"/>`+"\n", x(m.Died), x(m.Died), y, y+svgRowH-4)
		}
		fmt.Fprintf(b, `<text x="4" y="%d">%s</text>`+"\n", y+svgRowH/2+4, html.EscapeString(label))
	}
	for _, ho := range h.Holds {
		row, ok := rows[ho.Worker]
		if !ok {
			continue
		}
		y := svgTop + row*svgRowH + 2
		from, to := x(ho.Acquired), x(ho.End())
		stroke := ""
		for _, wr := range ho.Writes {
			if wr.Outcome == "rejected" {
				stroke = ` stroke="#b00020" stroke-width="2"`
			}
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"%s><title>%s token %d: %s..%s, %d writes</title></rect>`+"\n",
			from, y, max(to-from, 1), svgRowH-6, palette[row%len(palette)], stroke,
			html.EscapeString(ho.ID), ho.Token, h.at(ho.Acquired), h.at(ho.End()), len(ho.Writes))
		// Past its validity, the holder was still at work (paused, slow):
		// hatched up to its release, or its last write.
		last := ho.Releasing
		for _, wr := range ho.Writes {
			last = max(last, wr.At)
		}
		if last > ho.End() {
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="url(#stale)"><title>%s past its lease (token %d)</title></rect>`+"\n",
				to, y, max(x(last)-to, 1), svgRowH-6, html.EscapeString(ho.ID), ho.Token)
		}
	}
	// The time axis, in seconds from the start.
	axisY := svgTop + len(r.Members)*svgRowH + 4
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#888"/>`+"\n", svgLeft, svgLeft+svgWidth, axisY, axisY)
	step := tickStep(span)
	for t := time.Duration(0); t <= span; t += step {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#555">%gs</text>`+"\n", x(start+t), axisY+14, t.Seconds())
	}
	b.WriteString("</svg>\n")
}

func spanTitle(sp Span, start time.Duration) string {
	s := fmt.Sprintf("%s at +%.3fs", sp.Name(), (sp.Injected - start).Seconds())
	if sp.Healed > sp.Injected {
		s += fmt.Sprintf(", healed after %v", (sp.Healed - sp.Injected).Round(time.Millisecond))
	}
	if sp.Err != nil {
		s += ": " + sp.Err.Error()
	}
	return s
}

// tickStep picks a round step that gives at most about 12 ticks.
func tickStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
		2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		if span/s <= 12 {
			return s
		}
	}
	return 30 * time.Minute
}
