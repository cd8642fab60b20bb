// Package dashpic draws panels of the Grafana dashboard
// (deploy/grafana/solo-dashboard.json) from a real Prometheus's data: it
// reads the panels' own queries from the dashboard, runs them through
// Prometheus's query_range API, and renders the series as one SVG image
// of small charts, hand-written with fmt (Grafana cannot be installed on
// the machines that build solo).
//
// deploy/check's TestDashboardPicture drives it over a real failover to
// make docs/img/dashboard-failover.svg; TestAlert_NoLeaderEndToEnd renders
// the same panels on every run and checks that each query drew data.
package dashpic

import (
	"encoding/json"
	"fmt"
)

// Panel is one panel of the dashboard: its title, type (timeseries,
// state-timeline), unit and queries.
type Panel struct {
	Title string
	Type  string
	Unit  string
	// Wide is a panel as wide as the dashboard (gridPos.w 24).
	Wide    bool
	Targets []Target
}

// Target is one query of a panel.
type Target struct {
	RefID  string
	Expr   string
	Legend string // Grafana's legendFormat, {{label}} placeholders
}

// Dashboard is the part of a dashboard's JSON that the picture needs.
type Dashboard struct {
	Panels []Panel
	// Constants are the values of its constant variables, by name.
	Constants map[string]string
}

// Parse reads a dashboard's JSON: its panels (rows skipped, the panels of
// collapsed rows included) and its constant variables.
func Parse(b []byte) (Dashboard, error) {
	type jsonPanel struct {
		Title       string `json:"title"`
		Type        string `json:"type"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		GridPos struct {
			W int `json:"w"`
		} `json:"gridPos"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var raw struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Dashboard{}, fmt.Errorf("dashboard: %w", err)
	}
	d := Dashboard{Constants: map[string]string{}}
	for _, v := range raw.Templating.List {
		if v.Type != "constant" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			return Dashboard{}, fmt.Errorf("dashboard: constant variable %s: query %s is not a string", v.Name, v.Query)
		}
		d.Constants[v.Name] = q
	}
	var add func(msgs []json.RawMessage) error
	add = func(msgs []json.RawMessage) error {
		for _, m := range msgs {
			var p jsonPanel
			if err := json.Unmarshal(m, &p); err != nil {
				return fmt.Errorf("dashboard: panel: %w", err)
			}
			if p.Type == "row" {
				if err := add(p.Panels); err != nil {
					return err
				}
				continue
			}
			panel := Panel{Title: p.Title, Type: p.Type, Unit: p.FieldConfig.Defaults.Unit, Wide: p.GridPos.W >= 24}
			for _, t := range p.Targets {
				panel.Targets = append(panel.Targets, Target{RefID: t.RefID, Expr: t.Expr, Legend: t.LegendFormat})
			}
			d.Panels = append(d.Panels, panel)
		}
		return nil
	}
	if err := add(raw.Panels); err != nil {
		return Dashboard{}, err
	}
	return d, nil
}

// Panel returns the panel titled title.
func (d Dashboard) Panel(title string) (Panel, error) {
	for _, p := range d.Panels {
		if p.Title == title {
			return p, nil
		}
	}
	return Panel{}, fmt.Errorf("dashboard: no panel titled %q", title)
}
