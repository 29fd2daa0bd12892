package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// dashboardFile is the chart's Grafana dashboard, which the dashboard
// ConfigMap ships.
const dashboardFile = "../helm/nodedns/dashboards/nodedns.json"

// panelQuery is one PromQL expression of the dashboard: a panel's target,
// or a template variable's query.
type panelQuery struct {
	Panel string // panel title, or "variable NAME"
	RefID string
	Expr  string
}

// dashboardQueries returns every PromQL expression of a Grafana dashboard
// in the JSON model: the panels' targets (rows' nested panels included)
// and the query variables' label_values queries.
func dashboardQueries(raw []byte) (queries []panelQuery, variables []panelQuery, err error) {
	type panel struct {
		Title   string
		Panels  json.RawMessage
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string
		}
	}
	var dash struct {
		Panels     []panel
		Templating struct {
			List []struct {
				Name  string
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		return nil, nil, fmt.Errorf("dashboard: %w", err)
	}
	var walk func(ps []panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					return fmt.Errorf("panel %q target %s: no expr", p.Title, tg.RefID)
				}
				queries = append(queries, panelQuery{Panel: p.Title, RefID: tg.RefID, Expr: tg.Expr})
			}
			if len(p.Panels) > 0 {
				var nested []panel
				if err := json.Unmarshal(p.Panels, &nested); err != nil {
					return fmt.Errorf("row %q: %w", p.Title, err)
				}
				if err := walk(nested); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(dash.Panels); err != nil {
		return nil, nil, err
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		// Grafana writes the query as a string, or as {query: ...}.
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				return nil, nil, fmt.Errorf("variable %s: query %s", v.Name, v.Query)
			}
		}
		variables = append(variables, panelQuery{Panel: "variable " + v.Name, Expr: q.Query})
	}
	return queries, variables, nil
}

// expandQuery fills in what Grafana substitutes before it sends a query:
// $node with the "All" value (the variable's allValue, ".*") and
// $__rate_interval with rate.
func expandQuery(expr string, rate time.Duration) string {
	return strings.NewReplacer(
		"${node}", ".*", "$node", ".*",
		"${__rate_interval}", promDuration(rate), "$__rate_interval", promDuration(rate),
	).Replace(expr)
}

// promDuration writes d as a PromQL duration (whole seconds).
func promDuration(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Seconds())) }

// TestDashboardQueries checks the dashboard's JSON: every panel has a
// query, and after Grafana's substitutions no variable is left unexpanded
// (Prometheus would refuse the query).
func TestDashboardQueries(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, variables, err := dashboardQueries(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) == 0 || len(variables) == 0 {
		t.Fatalf("%d queries and %d variables found in %s", len(queries), len(variables), dashboardFile)
	}
	for _, q := range append(queries, variables...) {
		if e := expandQuery(q.Expr, 30*time.Second); strings.Contains(e, "$") {
			t.Errorf("panel %q: a variable is left after expansion: %s", q.Panel, e)
		}
	}
}

func TestDashboardQueriesNested(t *testing.T) {
	raw := `{"panels": [{"title": "row", "panels": [{"title": "inner", "targets": [{"refId": "A", "expr": "up"}]}]}],
		"templating": {"list": [{"name": "node", "type": "query", "query": "label_values(up, node)"}, {"name": "ds", "type": "datasource", "query": "prometheus"}]}}`
	q, v, err := dashboardQueries([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 1 || q[0].Panel != "inner" || q[0].Expr != "up" {
		t.Errorf("queries %+v, want the nested panel's", q)
	}
	if len(v) != 1 || v[0].Expr != "label_values(up, node)" {
		t.Errorf("variables %+v, want node's string query", v)
	}
	if _, _, err := dashboardQueries([]byte(`{"panels": [{"title": "empty", "targets": [{"refId": "A", "expr": ""}]}]}`)); err == nil {
		t.Error("a target without expr was accepted")
	}
}
