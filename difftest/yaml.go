package difftest

import "sigs.k8s.io/yaml"

// yamlRoundTrip deep-copies a values tree through YAML.
func yamlRoundTrip(v any) (any, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = yaml.Unmarshal(b, &out)
	return out, err
}
