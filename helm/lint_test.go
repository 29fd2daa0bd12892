package helm

import (
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestLint runs the SDK's lint action (what `helm lint --strict` runs) on
// the chart directory with each rendering case's values.
func TestLint(t *testing.T) {
	for _, tc := range renderCases {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := ParseValues(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = DefaultNamespace
			res := lint.Run([]string{"nodedns"}, vals)
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

// TestLintFails makes sure the lint above can fail: object names that are
// not DNS labels are an error. (Values the chart rejects with `fail` or
// `required` are not: lint mode only logs those; TestRenderRejects checks
// them.)
func TestLintFails(t *testing.T) {
	lint := action.NewLint()
	lint.Strict = true
	res := lint.Run([]string{"nodedns"}, map[string]any{"fullnameOverride": "Bad_Name"})
	if len(res.Errors) == 0 {
		t.Errorf("lint passed fullnameOverride Bad_Name: %v", res.Messages)
	}
}
