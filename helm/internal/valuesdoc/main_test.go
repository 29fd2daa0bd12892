package main

import (
	"strings"
	"testing"
)

// TestREADME fails when helm/nodedns/README.md's values table is not the
// one values.yaml gives, or a value has no comment.
func TestREADME(t *testing.T) {
	if err := run("../../nodedns/values.yaml", "../../nodedns/README.md", true); err != nil {
		t.Fatal(err)
	}
}

func TestRows(t *testing.T) {
	rows, err := Rows([]byte(`# File header.

# The mode.
mode: iptables
cache:
  # Entries.
  size: 10
# Resources.
resources:
  requests: {cpu: 1}
# Empty.
extra: []
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Key+"="+r.Default+":"+r.Description)
	}
	want := `mode="iptables":The mode.|cache.size=10:Entries.|resources={"requests":{"cpu":1}}:Resources.|extra=[]:Empty.`
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
	if _, err := Rows([]byte("a: 1\n")); err == nil {
		t.Errorf("a key without a comment passed")
	}
}
