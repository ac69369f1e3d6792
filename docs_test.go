package dsync_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docFiles are the pages whose Go snippets and links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md", "CHANGELOG.md"}, docs...)
}

// snippet is one ```go block of a page.
type snippet struct {
	file string
	line int
	code string
}

func goSnippets(t *testing.T) []snippet {
	t.Helper()
	var out []snippet
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```go" {
				continue
			}
			start := i + 1
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			}
			out = append(out, snippet{f, start + 1, strings.Join(lines[start:i], "\n")})
		}
	}
	return out
}

// snippetPrelude declares what the fragments of the docs use without
// declaring it: a context, an open backend, a URL, telemetry providers, a
// logger, a host name and the functions of the examples.
const snippetPrelude = `
var (
	ctx      = context.Background()
	b        *dsync.Backend
	url      string
	hostname string
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	logger   *slog.Logger
	_        = os.Getenv
)

func export(context.Context) error           { return nil }
func schedule(context.Context, uint64) error { return nil }
`

var elision = regexp.MustCompile(`(?m)^(\s*)\.\.\.\s*$|\{ \.\.\. \}`)

// buildable turns a snippet into a file that compiles if the snippet is
// right. A snippet that starts with "package" is a whole file. Any other
// is a fragment of a function body: its import lines are lifted to the
// file, a line "..." or a block "{ ... }" stands for code left out, and
// every variable it declares counts as used.
func buildable(s snippet) (string, error) {
	code := strings.TrimSpace(s.code)
	if strings.HasPrefix(code, "package ") {
		return code + "\n", nil
	}
	var imports, body []string
	for _, l := range strings.Split(code, "\n") {
		if strings.HasPrefix(l, "import ") {
			imports = append(imports, l)
		} else {
			body = append(body, l)
		}
	}
	fn := elision.ReplaceAllStringFunc(strings.Join(body, "\n"), func(m string) string {
		if strings.Contains(m, "{") {
			return "{}"
		}
		return strings.TrimSuffix(m, "...") + "_ = 0"
	})
	const wrap = "package p\nfunc _() {\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", wrap+fn+"\n}", 0)
	if err != nil {
		return "", err
	}
	// Every variable declared counts as used: those of := after the
	// fragment, those of a range at the top of its body.
	var used []string
	type insert struct {
		at   int
		text string
	}
	var inserts []insert
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name != "_" && !slices.Contains(used, id.Name) {
						used = append(used, id.Name)
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
						at := fset.Position(n.Body.Lbrace).Offset + 1 - len(wrap)
						inserts = append(inserts, insert{at, " _ = " + id.Name + ";"})
					}
				}
			}
		}
		return true
	})
	for i := len(inserts) - 1; i >= 0; i-- {
		fn = fn[:inserts[i].at] + inserts[i].text + fn[inserts[i].at:]
	}
	var sb strings.Builder
	sb.WriteString("package snippet\n\nimport (\n\t\"context\"\n\t\"log/slog\"\n\t\"os\"\n\n\t\"go.opentelemetry.io/otel/metric\"\n\t\"go.opentelemetry.io/otel/trace\"\n\n\t\"github.com/dsync-dev/dsync\"\n)\n\n")
	for _, imp := range imports {
		sb.WriteString(imp + "\n")
	}
	sb.WriteString(snippetPrelude)
	sb.WriteString("\nfunc _() {\n" + fn + "\n")
	for _, u := range used {
		sb.WriteString("\t_ = " + u + "\n")
	}
	sb.WriteString("}\n")
	return sb.String(), nil
}

// TestDocSnippetsCompile builds every Go snippet of README.md, CHANGELOG.md
// and docs/ against this module, each as a package of its own placed in
// the module by a build overlay (nothing is written to the tree).
func TestDocSnippetsCompile(t *testing.T) {
	snippets := goSnippets(t)
	if len(snippets) == 0 {
		t.Fatal("no ```go snippet found: is the test running in the module's root?")
	}
	tmp := t.TempDir()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	replace := map[string]string{}
	var pkgs []string
	where := map[string]snippet{}
	for i, s := range snippets {
		src, err := buildable(s)
		if err != nil {
			t.Errorf("%s:%d: the snippet does not parse: %v", s.file, s.line, err)
			continue
		}
		name := fmt.Sprintf("snippet%d", i)
		file := filepath.Join(tmp, name+".go")
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "internal", "docsnippets", name)
		replace[filepath.Join(dir, "snippet.go")] = file
		pkgs = append(pkgs, "./internal/docsnippets/"+name)
		where["internal/docsnippets/"+name] = s
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		cmd := exec.Command("go", "build", "-o", os.DevNull, "-overlay", ov, p)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			s := where[strings.TrimPrefix(p, "./")]
			src, _ := buildable(s)
			t.Errorf("%s:%d: the snippet does not compile:\n%s\nas built:\n%s", s.file, s.line, out.String(), src)
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksResolve checks every relative link of README.md, CHANGELOG.md
// and docs/: the file exists and, for a Markdown page, so does the anchor.
func TestDocLinksResolve(t *testing.T) {
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %q: %v", f, link, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !slices.Contains(anchors(t, target), anchor) {
				t.Errorf("%s: link %q: no heading with that anchor in %s", f, link, target)
			}
		}
	}
}

// anchors lists the anchors GitHub makes of a page's headings.
func anchors(t *testing.T, page string) []string {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		h = strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z':
				return r
			case r > 127:
				return r
			}
			return -1
		}, h)
		out = append(out, h)
	}
	return out
}

// TestReadmeIsAFrontPage keeps README.md a front page: what dsync is, why,
// how to start, and links; the rest belongs in docs/.
func TestReadmeIsAFrontPage(t *testing.T) {
	const max = 15 << 10
	info, err := os.Stat("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > max {
		t.Errorf("README.md is %d bytes, more than %d: move detail to docs/", info.Size(), max)
	}
}
