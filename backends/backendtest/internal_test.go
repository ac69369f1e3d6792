package backendtest

import "testing"

// The replay that judges the process hammer must see an overlap when there
// is one: a checker that cannot fail proves nothing.
func TestMostInsideSeesOverlaps(t *testing.T) {
	evs := []event{
		{Worker: 0, Name: "acquired", At: 10}, {Worker: 1, Name: "acquired", At: 12},
		{Worker: 0, Name: "releasing", At: 20}, {Worker: 2, Name: "acquired", At: 15},
		{Worker: 1, Name: "releasing", At: 30}, {Worker: 2, Name: "releasing", At: 31},
		{Worker: 0, Name: "acquired", At: 40}, {Worker: 0, Name: "releasing", At: 41},
	}
	if most, sections := mostInside(evs); most != 3 || sections != 4 {
		t.Fatalf("mostInside: %d at once, %d sections; want 3 and 4", most, sections)
	}
	// Back to back (one releases at the stamp the next acquires): not an
	// overlap, since a release is stamped before the release is made.
	evs = []event{{Worker: 0, Name: "acquired", At: 1}, {Worker: 0, Name: "releasing", At: 5}, {Worker: 1, Name: "acquired", At: 6}}
	if most, _ := mostInside(evs); most != 1 {
		t.Fatalf("sequential holds: %d at once, want 1", most)
	}
}
