package dashpic

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Chart is one panel's data, ready to draw.
type Chart struct {
	Title string
	// Kind is the panel type: "state-timeline" draws a band per series
	// coloured by value; anything else a line per series.
	Kind   string
	Unit   string // Grafana's unit: "s", "ops" or "" (a plain number)
	Wide   bool
	Series []Series
}

// Series is one series of a chart.
type Series struct {
	Name   string // its legend
	Ref    string // the refId of the query that returned it
	Points []Point

	labels map[string]string
}

// Point is one sample of a series. A NaN or infinite value is a gap.
type Point struct {
	T time.Time
	V float64
}

// Marker is an event drawn as a numbered vertical line across every
// chart, such as the instant a leader was killed.
type Marker struct {
	T     time.Time
	Label string
}

// Picture is the whole image: a title, lines of notes under it, the
// charts over one time range, and the markers.
type Picture struct {
	Title      string
	Notes      []string
	Start, End time.Time
	// Step is the samples' interval: points further apart than 1.5 steps
	// are not joined.
	Step    time.Duration
	Charts  []Chart
	Markers []Marker
}

// Layout, in pixels.
const (
	width      = 1200
	margin     = 16
	titleH     = 28
	plotH      = 130
	bandH      = 20
	axisH      = 20
	legendLine = 16
	charW      = 6.6 // average width of a 12px sans-serif character
	fontSize   = 12
)

// palette is Grafana's classic series palette.
var palette = []string{"#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0", "#508642", "#CCA300"}

// Colours of a state timeline's values.
const (
	stateOn    = "#56A64B" // 1: leads
	stateOff   = "#D8D9DA" // 0: follows
	stateOther = "#F2CC0C"
)

// Render writes p as an SVG image: one panel per chart, two charts side by
// side unless a chart is wide, each with its title, axes, a legend entry
// per series and the markers.
func Render(w io.Writer, p Picture) error {
	if !p.End.After(p.Start) {
		return fmt.Errorf("dashpic: end %s is not after start %s", p.End, p.Start)
	}
	if p.Step <= 0 {
		return fmt.Errorf("dashpic: step %s is not positive", p.Step)
	}
	var body strings.Builder
	y := float64(margin)
	// Header: the title, the notes, the markers.
	y += 18
	fmt.Fprintf(&body, `<text x="%d" y="%.1f" font-size="18" font-weight="bold">%s</text>`+"\n", margin, y, esc(p.Title))
	for _, n := range p.Notes {
		y += legendLine
		fmt.Fprintf(&body, `<text x="%d" y="%.1f" class="note">%s</text>`+"\n", margin, y, esc(n))
	}
	for i, m := range p.Markers {
		y += legendLine
		fmt.Fprintf(&body, `<text x="%d" y="%.1f" class="note"><tspan fill="#C4162A" font-weight="bold">%d</tspan> %s  %s</text>`+"\n",
			margin, y, i+1, m.T.UTC().Format("15:04:05"), esc(m.Label))
	}
	y += 12

	// Charts, two to a row unless wide.
	half := float64(width-3*margin) / 2
	for i := 0; i < len(p.Charts); {
		c := p.Charts[i]
		if c.Wide || i+1 == len(p.Charts) || p.Charts[i+1].Wide {
			w := float64(width - 2*margin)
			if !c.Wide {
				w = half
			}
			h := panelHeight(c, w)
			drawPanel(&body, p, c, margin, y, w, h)
			y += h + margin
			i++
			continue
		}
		d := p.Charts[i+1]
		h := max(panelHeight(c, half), panelHeight(d, half))
		drawPanel(&body, p, c, margin, y, half, h)
		drawPanel(&body, p, d, 2*margin+half, y, half, h)
		y += h + margin
		i += 2
	}

	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="%d">
<style>.note{fill:#464C54} .axis{fill:#6E7079;font-size:11px} .grid{stroke:#E6E6E6;stroke-width:1} .marker{stroke:#C4162A;stroke-width:1.2;stroke-dasharray:4 3} .series{fill:none;stroke-width:1.8;stroke-linejoin:round;stroke-linecap:round}</style>
<rect width="100%%" height="100%%" fill="#FFFFFF"/>
`, width, y, width, y, fontSize)
	bw.WriteString(body.String())
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// panelHeight is the height of chart c's panel, w wide.
func panelHeight(c Chart, w float64) float64 {
	h := titleH + axisH + 8.0
	if c.Kind == "state-timeline" {
		h += float64(max(len(c.Series), 1)) * bandH
	} else {
		h += plotH
	}
	return h + float64(len(legendLines(c, w)))*legendLine
}

// legendItem is one entry of a legend: a colour and a text.
type legendItem struct {
	color, text string
}

// legendLines lays c's legend out in lines that fit w.
func legendLines(c Chart, w float64) [][]legendItem {
	var items []legendItem
	if c.Kind == "state-timeline" {
		items = []legendItem{{stateOn, "1 (leads)"}, {stateOff, "0 (follows)"}}
	} else {
		for i, s := range c.Series {
			text := s.Name
			if m, ok := seriesMax(s); ok {
				text += "  max " + formatValue(m, c.Unit)
			}
			items = append(items, legendItem{palette[i%len(palette)], text})
		}
	}
	var lines [][]legendItem
	var line []legendItem
	used := 0.0
	for _, it := range items {
		iw := itemWidth(it)
		if len(line) > 0 && used+iw > w-16 {
			lines = append(lines, line)
			line, used = nil, 0
		}
		line = append(line, it)
		used += iw
	}
	if len(line) > 0 {
		lines = append(lines, line)
	}
	return lines
}

func itemWidth(it legendItem) float64 {
	return 18 + float64(len([]rune(it.text)))*charW + 16
}

// drawPanel draws chart c in the box at (x, y), w × h.
func drawPanel(b *strings.Builder, p Picture, c Chart, x, y, w, h float64) {
	fmt.Fprintf(b, `<g class="panel"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="3" fill="#FFFFFF" stroke="#D0D1D3"/>`+"\n", x, y, w, h)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-weight="bold" font-size="13" class="title">%s</text>`+"\n", x+8, y+19, esc(c.Title))

	top := y + titleH
	var left, ph float64
	var ticks []float64
	if c.Kind == "state-timeline" {
		left = x + 8 + float64(maxNameLen(c))*charW + 8
		ph = float64(max(len(c.Series), 1)) * bandH
	} else {
		ticks = valueTicks(dataRange(c))
		widest := 0
		for _, v := range ticks {
			widest = max(widest, len(tickLabel(v, ticks, c.Unit)))
		}
		left = x + 16 + float64(widest)*charW
		ph = plotH
	}
	right := x + w - 12
	tx := func(t time.Time) float64 {
		return left + (right-left)*float64(t.Sub(p.Start))/float64(p.End.Sub(p.Start))
	}

	// Time axis: gridlines and labels.
	tick := timeTick(p.End.Sub(p.Start), right-left)
	for t := p.Start.Truncate(tick); !t.After(p.End); t = t.Add(tick) {
		xx := tx(t)
		if t.Before(p.Start) || xx-left < 24 { // clear of the value axis' labels
			continue
		}
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", xx, top, xx, top+ph)
		fmt.Fprintf(b, `<text class="axis" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xx, top+ph+14, t.UTC().Format("15:04:05"))
	}

	if c.Kind == "state-timeline" {
		drawBands(b, p, c, x, left, top, tx)
	} else {
		drawLines(b, p, c, ticks, left, right, top, tx)
	}

	// Markers.
	labelEnd := math.Inf(-1) // where the last marker's number ends
	for i, m := range p.Markers {
		if m.T.Before(p.Start) || m.T.After(p.End) {
			continue
		}
		xx := tx(m.T)
		fmt.Fprintf(b, `<line class="marker" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", xx, top-6, xx, top+ph)
		lx := max(xx+3, labelEnd+4)
		fmt.Fprintf(b, `<text class="marker-label" x="%.1f" y="%.1f" fill="#C4162A" font-size="11" font-weight="bold">%d</text>`+"\n", lx, top-1, i+1)
		labelEnd = lx + float64(len(strconv.Itoa(i+1)))*charW
	}

	// Legend.
	ly := top + ph + axisH + 10
	for _, line := range legendLines(c, w) {
		lx := x + 8
		for _, it := range line {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="4" rx="1" fill="%s"/>`, lx, ly-6, it.color)
			fmt.Fprintf(b, `<text class="legend" x="%.1f" y="%.1f">%s</text>`+"\n", lx+18, ly, esc(it.text))
			lx += itemWidth(it)
		}
		ly += legendLine
	}
	b.WriteString("</g>\n")
}

// drawBands draws a state timeline: a row per series, a band per run of
// one value, nothing where the series has no sample.
func drawBands(b *strings.Builder, p Picture, c Chart, x, left, top float64, tx func(time.Time) float64) {
	gap := p.Step * 3 / 2
	for i, s := range c.Series {
		ry := top + float64(i)*bandH
		fmt.Fprintf(b, `<text class="legend" x="%.1f" y="%.1f">%s</text>`+"\n", x+8, ry+bandH/2+4, esc(s.Name))
		for j := 0; j < len(s.Points); {
			v := s.Points[j].V
			if !finite(v) {
				j++
				continue
			}
			k := j
			for k+1 < len(s.Points) && s.Points[k+1].V == v && s.Points[k+1].T.Sub(s.Points[k].T) <= gap {
				k++
			}
			end := s.Points[k].T.Add(p.Step)
			if k+1 < len(s.Points) && s.Points[k+1].T.Sub(s.Points[k].T) <= gap {
				end = s.Points[k+1].T
			}
			if end.After(p.End) {
				end = p.End
			}
			color := stateOther
			switch v {
			case 1:
				color = stateOn
			case 0:
				color = stateOff
			}
			x0, x1 := tx(s.Points[j].T), tx(end)
			fmt.Fprintf(b, `<rect class="band" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				x0, ry+2, max(x1-x0, 1), bandH-4, color, esc(s.Name+" = "+strconv.FormatFloat(v, 'g', -1, 64)))
			j = k + 1
		}
	}
}

// drawLines draws a time series chart: a y axis over ticks, a line per
// series broken at gaps.
func drawLines(b *strings.Builder, p Picture, c Chart, ticks []float64, left, right, top float64, tx func(time.Time) float64) {
	lo, hi := ticks[0], ticks[len(ticks)-1]
	ty := func(v float64) float64 { return top + plotH - plotH*(v-lo)/(hi-lo) }
	for _, v := range ticks {
		yy := ty(v)
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", left, yy, right, yy)
		fmt.Fprintf(b, `<text class="axis" x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, yy+4, esc(tickLabel(v, ticks, c.Unit)))
	}
	gap := p.Step * 3 / 2
	for i, s := range c.Series {
		var d strings.Builder
		var prev time.Time
		open := false
		for _, pt := range s.Points {
			if !finite(pt.V) {
				open = false
				continue
			}
			cmd := "L"
			if !open || pt.T.Sub(prev) > gap {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, tx(pt.T), ty(pt.V))
			open, prev = true, pt.T
		}
		if d.Len() == 0 {
			continue
		}
		// A lone point is a dot: a zero-length segment with round caps.
		fmt.Fprintf(b, `<path class="series" stroke="%s" d="%s"><title>%s</title></path>`+"\n",
			palette[i%len(palette)], strings.TrimSpace(dots(d.String())), esc(s.Name))
	}
}

// dots turns each lone M (an M not followed by an L) into a zero-length
// line, which round caps draw as a dot.
func dots(d string) string {
	f := strings.Fields(d)
	var out []string
	for i := 0; i < len(f); i += 2 {
		out = append(out, f[i], f[i+1])
		if strings.HasPrefix(f[i], "M") && (i+2 >= len(f) || strings.HasPrefix(f[i+2], "M")) {
			out = append(out, "l0", "0")
		}
	}
	return strings.Join(out, " ")
}

// dataRange is the lowest and highest finite value of c's series, as
// Grafana scales a time series axis by default (not from 0).
func dataRange(c Chart) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, pt := range s.Points {
			if finite(pt.V) {
				lo, hi = math.Min(lo, pt.V), math.Max(hi, pt.V)
			}
		}
	}
	if lo > hi {
		return 0, 1
	}
	return lo, hi
}

// tickLabel writes the tick v of an axis in c's unit, with the digits
// that tell the ticks apart (a term, a microsecond timestamp, needs all
// sixteen).
func tickLabel(v float64, ticks []float64, unit string) string {
	if unit == "" && len(ticks) > 1 {
		step := ticks[1] - ticks[0]
		return strconv.FormatFloat(v, 'f', max(0, -int(math.Floor(math.Log10(step)))), 64)
	}
	return formatValue(v, unit)
}

// timeTick is a round interval that puts time labels at least 90 pixels
// apart on a span of px pixels.
func timeTick(span time.Duration, px float64) time.Duration {
	for _, t := range []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour} {
		if px*float64(t)/float64(span) >= 90 {
			return t
		}
	}
	return time.Hour
}

// valueTicks returns 2 to 8 round values from at most lo to at least hi.
// A flat series gets an axis from 0.
func valueTicks(lo, hi float64) []float64 {
	if hi <= lo {
		switch {
		case lo > 0:
			lo = 0
		case lo < 0:
			hi = 0
		default:
			hi = 1
		}
	}
	raw := (hi - lo) / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag * 10
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	var ticks []float64
	for i := 0; i < 8; i++ {
		v := start + float64(i)*step
		ticks = append(ticks, v)
		if v >= hi-step*1e-9 {
			break
		}
	}
	return ticks
}

// formatValue writes v in Grafana's unit: seconds (ms below 1s),
// operations per second, or a plain number.
func formatValue(v float64, unit string) string {
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', 3, 64) }
	if unit == "" && v == math.Trunc(v) && math.Abs(v) < 1e17 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	switch unit {
	case "s":
		if v != 0 && math.Abs(v) < 1 {
			return num(v*1000) + " ms"
		}
		return num(v) + " s"
	case "ops":
		return num(v) + " ops/s"
	default:
		return num(v)
	}
}

func seriesMax(s Series) (float64, bool) {
	m, ok := math.Inf(-1), false
	for _, pt := range s.Points {
		if finite(pt.V) && pt.V > m {
			m, ok = pt.V, true
		}
	}
	return m, ok
}

func maxNameLen(c Chart) int {
	n := 10
	for _, s := range c.Series {
		n = max(n, len([]rune(s.Name)))
	}
	return n
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// esc escapes s for XML text and attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
