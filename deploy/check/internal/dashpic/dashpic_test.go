package dashpic

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 26, 19, 0, 0, 0, time.UTC)

// series returns a series of one point a second from t0 with values vs.
func series(name string, vs ...float64) Series {
	s := Series{Name: name, Ref: "A"}
	for i, v := range vs {
		s.Points = append(s.Points, Point{T: t0.Add(time.Duration(i) * time.Second), V: v})
	}
	return s
}

// svgElement is an element of the rendered SVG: its name, class, text,
// attributes, and the text of its <title> child (a tooltip).
type svgElement struct {
	name, class, text, title string
	attr                     map[string]string
}

// parseSVG decodes b as XML (failing the test when it is not) and returns
// its elements in order.
func parseSVG(t *testing.T, b []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var els []svgElement
	var stack []int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not valid XML: %v\n%s", err, b)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attr: map[string]string{}}
			for _, a := range tok.Attr {
				e.attr[a.Name.Local] = a.Value
			}
			e.class = e.attr["class"]
			els = append(els, e)
			stack = append(stack, len(els)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				e := &els[stack[len(stack)-1]]
				e.text += string(tok)
				if e.name == "title" && len(stack) > 1 {
					els[stack[len(stack)-2]].title += string(tok)
				}
			}
		}
	}
	if len(els) == 0 || els[0].name != "svg" {
		t.Fatalf("the document's root is not <svg>:\n%s", b)
	}
	return els
}

func count(els []svgElement, name, class string) int {
	n := 0
	for _, e := range els {
		if e.name == name && e.class == class {
			n++
		}
	}
	return n
}

func texts(els []svgElement) string {
	var b strings.Builder
	for _, e := range els {
		if e.name == "text" || e.name == "tspan" {
			b.WriteString(e.text + "\n")
		}
	}
	return b.String()
}

// TestRender draws fixed series and checks the SVG: valid XML, a panel per
// chart with its title, a path per series that has a finite point, a band
// per run of one value, a legend entry per series, a marker per chart.
func TestRender(t *testing.T) {
	nan := math.NaN()
	p := Picture{
		Title: "solo <failover> & co", Notes: []string{"made by a test"},
		Start: t0, End: t0.Add(9 * time.Second), Step: time.Second,
		Charts: []Chart{
			{Title: "Leader per election", Kind: "state-timeline", Wide: true, Series: []Series{
				series("orders solo-a", 1, 1, 1, 1, nan, nan, nan, nan, nan, nan),
				series("orders solo-b", 0, 0, 0, 0, 0, 1, 1, 1, 1, 1),
			}},
			{Title: "Term", Kind: "timeseries", Series: []Series{series("orders", 1, 1, 1, 1, 1, 2, 2, 2, 2, 2)}},
			{Title: "Renew latency", Kind: "timeseries", Unit: "s", Series: []Series{
				series("p99 orders solo-a", 0.002, 0.003, nan, 0.7, 0.002), // gap: two segments in one path
				series("p50 orders solo-b", nan, nan, nan, 0.001),          // a lone point
				series("never", nan, nan),                                  // no finite point: no path
			}},
		},
		Markers: []Marker{{T: t0.Add(4500 * time.Millisecond), Label: "kill -9 solo-a"}},
	}
	var buf bytes.Buffer
	if err := Render(&buf, p); err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, buf.Bytes())
	if got := count(els, "g", "panel"); got != 3 {
		t.Errorf("%d panels, want 3", got)
	}
	if got := count(els, "path", "series"); got != 3 {
		t.Errorf("%d series paths, want 3 (Term, p99, p50; none for the series without a finite point)", got)
	}
	// solo-a leads one run; solo-b follows one run and leads one.
	if got := count(els, "rect", "band"); got != 3 {
		t.Errorf("%d state bands, want 3", got)
	}
	if got := count(els, "line", "marker"); got != 3 {
		t.Errorf("%d marker lines, want 3 (one per chart)", got)
	}
	all := texts(els)
	for _, want := range []string{
		"solo <failover> & co", "made by a test", "kill -9 solo-a", "19:00:04",
		"Leader per election", "Term", "Renew latency",
		"orders solo-a", "orders solo-b", "1 (leads)", "0 (follows)",
		"orders  max 2", "p99 orders solo-a  max 700 ms", "p50 orders solo-b  max 1 ms", "never",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no text %q in the SVG; its texts:\n%s", want, all)
		}
	}
	checked := 0
	for _, e := range els {
		if e.name == "path" && e.class == "series" {
			d := e.attr["d"]
			switch e.title {
			case "p99 orders solo-a":
				checked++
				if strings.Count(d, "M") != 2 {
					t.Errorf("p99's path %q: want 2 segments (the NaN is a gap)", d)
				}
			case "p50 orders solo-b":
				checked++
				if !strings.Contains(d, "l0 0") {
					t.Errorf("p50's path %q: want a dot for its lone point", d)
				}
			}
		}
	}
	if checked != 2 {
		t.Errorf("found %d of the paths of p99 and p50 by their titles, want 2", checked)
	}
	if bytes.Contains(buf.Bytes(), []byte("NaN")) || bytes.Contains(buf.Bytes(), []byte("Inf")) {
		t.Errorf("the SVG has a NaN or Inf coordinate:\n%s", buf.Bytes())
	}
}

func TestRender_RejectsEmptyRange(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, Picture{Start: t0, End: t0, Step: time.Second}); err == nil || !strings.Contains(err.Error(), "end") {
		t.Errorf("Render with end == start: %v, want an error naming end", err)
	}
	if err := Render(&buf, Picture{Start: t0, End: t0.Add(time.Minute)}); err == nil || !strings.Contains(err.Error(), "step") {
		t.Errorf("Render with no step: %v, want an error naming step", err)
	}
}

// TestChart runs a panel's queries against a fake query_range and checks
// the macros and variables sent, the legends and the points decoded.
func TestChart(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got = append(got, r.Form.Get("query")+" step="+r.Form.Get("step"))
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"matrix","result":[
			{"metric":{"election":"orders","instance":"solo-b"},"values":[[1795719600,"1"],[1795719601.5,"NaN"]]},
			{"metric":{"election":"orders","instance":"solo-a"},"values":[[1795719600,"0"]]}]}}`)
	}))
	defer srv.Close()
	r := Range{API: srv.URL + "/api/v1/", Start: t0, End: t0.Add(time.Minute), Step: 2 * time.Second, Scrape: time.Second,
		Vars: map[string]string{"election": "orders", "renew_margin": "1"}, Client: srv.Client()}
	c, err := r.Chart(context.Background(), Panel{Title: "T", Type: "timeseries", Targets: []Target{
		{RefID: "A", Expr: `rate(x{election=~"$election"}[$__rate_interval]) > $renew_margin`, Legend: "{{ election }} {{instance}} {{missing}}"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `rate(x{election=~"orders"}[4000ms]) > 1 step=2.000`; len(got) != 1 || got[0] != want {
		t.Errorf("queries sent %q, want [%q]", got, want)
	}
	if len(c.Series) != 2 || c.Series[0].Name != "orders solo-a" || c.Series[1].Name != "orders solo-b" {
		t.Fatalf("series %+v, want orders solo-a, orders solo-b (sorted)", c.Series)
	}
	b := c.Series[1]
	if len(b.Points) != 2 || b.Points[0].V != 1 || !math.IsNaN(b.Points[1].V) ||
		!b.Points[1].T.Equal(time.Unix(1795719601, 5e8)) || b.Ref != "A" {
		t.Errorf("solo-b's series %+v", b)
	}
}

// TestParse reads the shipped dashboard: its panels, with the collapsed
// rows' ones, and its constants.
func TestParse(t *testing.T) {
	b, err := os.ReadFile("../../../grafana/solo-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Panel("Leader per election")
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != "state-timeline" || !p.Wide || len(p.Targets) != 1 || !strings.Contains(p.Targets[0].Expr, "solo_election_leader") {
		t.Errorf("Leader per election: %+v", p)
	}
	if _, ok := d.Constants["renew_margin"]; !ok {
		t.Errorf("no constant renew_margin in %v", d.Constants)
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			t.Errorf("row %q listed as a panel", p.Title)
		}
	}
	if _, err := d.Panel("no such panel"); err == nil {
		t.Error("Panel of a missing title: no error")
	}
}

// TestValueTicks checks that an axis covers its data with 2 to 8 ticks
// whose labels differ, terms (microsecond timestamps) included.
func TestValueTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		unit   string
	}{
		{0, 0, ""}, {5, 5, ""}, {-3, -3, ""}, {0, 2.01, ""}, {0.0004, 0.7, "s"}, {0, 1.05, "ops"},
		{1795720069000000, 1795720087000000, ""}, {1795720069000000, 1795720069000000, ""},
	} {
		ticks := valueTicks(c.lo, c.hi)
		if len(ticks) < 2 || len(ticks) > 8 || ticks[0] > c.lo || ticks[len(ticks)-1] < c.hi {
			t.Errorf("valueTicks(%v, %v) = %v: does not cover the range with 2 to 8 ticks", c.lo, c.hi, ticks)
			continue
		}
		seen := map[string]bool{}
		for _, v := range ticks {
			l := tickLabel(v, ticks, c.unit)
			if seen[l] {
				t.Errorf("valueTicks(%v, %v) = %v: label %q twice", c.lo, c.hi, ticks, l)
			}
			seen[l] = true
		}
	}
}
