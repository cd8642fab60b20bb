package dashpic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Range is a query_range over a Prometheus: where, when, and the values
// of the dashboard's variables, as Grafana would send them.
type Range struct {
	// API is Prometheus's API root, such as http://127.0.0.1:9090/api/v1/.
	API        string
	Start, End time.Time
	// Step is the resolution, Grafana's $__interval.
	Step time.Duration
	// Scrape is the scrape interval, from which $__rate_interval is made
	// as Grafana makes it: max($__interval + scrape, 4 × scrape).
	Scrape time.Duration
	// Vars are the dashboard's variables by name (without $): the election
	// regexp, the constants.
	Vars map[string]string
	// Client does the requests; nil means http.DefaultClient.
	Client *http.Client
}

// Chart runs each query of p over r and returns the series it drew, the
// legends made from the panel's legendFormat.
func (r Range) Chart(ctx context.Context, p Panel) (Chart, error) {
	c := Chart{Title: p.Title, Kind: p.Type, Unit: p.Unit, Wide: p.Wide}
	for _, t := range p.Targets {
		expr := r.expand(t.Expr)
		series, err := r.query(ctx, expr)
		if err != nil {
			return Chart{}, fmt.Errorf("panel %q, query %s (%s): %w", p.Title, t.RefID, expr, err)
		}
		for i := range series {
			series[i].Ref = t.RefID
			series[i].Name = legend(t.Legend, series[i].labels)
		}
		sort.SliceStable(series, func(i, j int) bool { return series[i].Name < series[j].Name })
		c.Series = append(c.Series, series...)
	}
	return c, nil
}

// expand replaces Grafana's macros and the dashboard's variables in expr.
func (r Range) expand(expr string) string {
	rate := max(r.Step+r.Scrape, 4*r.Scrape)
	vals := map[string]string{
		"__interval":      promDuration(r.Step),
		"__rate_interval": promDuration(rate),
		"__range":         promDuration(r.End.Sub(r.Start)),
	}
	for k, v := range r.Vars {
		vals[k] = v
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	// Longest first, so that $__rate_interval is not read as $__r… of a
	// shorter name.
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	var pairs []string
	for _, k := range names {
		pairs = append(pairs, "${"+k+"}", vals[k], "$"+k, vals[k])
	}
	return strings.NewReplacer(pairs...).Replace(expr)
}

// promDuration writes d in Prometheus's duration syntax, in milliseconds.
func promDuration(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// query runs a query_range and returns its series.
func (r Range) query(ctx context.Context, expr string) ([]Series, error) {
	v := url.Values{}
	v.Set("query", expr)
	v.Set("start", strconv.FormatFloat(float64(r.Start.UnixMilli())/1000, 'f', 3, 64))
	v.Set("end", strconv.FormatFloat(float64(r.End.UnixMilli())/1000, 'f', 3, 64))
	v.Set("step", strconv.FormatFloat(r.Step.Seconds(), 'f', 3, 64))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.API+"query_range", strings.NewReader(v.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	client := r.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string    `json:"metric"`
				Values [][2]json.RawMessage `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("query_range: %s: %w", resp.Status, err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query_range: %s: %s", resp.Status, out.Error)
	}
	if out.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("query_range: result type %q, want matrix", out.Data.ResultType)
	}
	var series []Series
	for _, res := range out.Data.Result {
		s := Series{labels: res.Metric}
		for _, pair := range res.Values {
			var ts float64
			var val string
			if err := json.Unmarshal(pair[0], &ts); err != nil {
				return nil, fmt.Errorf("query_range: timestamp %s: %w", pair[0], err)
			}
			if err := json.Unmarshal(pair[1], &val); err != nil {
				return nil, fmt.Errorf("query_range: value %s: %w", pair[1], err)
			}
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, fmt.Errorf("query_range: value %q: %w", val, err)
			}
			sec, frac := math.Modf(ts)
			s.Points = append(s.Points, Point{T: time.Unix(int64(sec), int64(math.Round(frac*1e3))*1e6).UTC(), V: f})
		}
		series = append(series, s)
	}
	return series, nil
}

var placeholder = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// legend fills Grafana's legendFormat with the series' labels; an empty
// format shows the labels as a selector.
func legend(format string, labels map[string]string) string {
	if format == "" {
		var kv []string
		for k, v := range labels {
			kv = append(kv, k+"="+strconv.Quote(v))
		}
		sort.Strings(kv)
		return "{" + strings.Join(kv, ", ") + "}"
	}
	s := placeholder.ReplaceAllStringFunc(format, func(m string) string {
		return labels[placeholder.FindStringSubmatch(m)[1]]
	})
	return strings.Join(strings.Fields(s), " ")
}
