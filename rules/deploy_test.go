package rules

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	grafanaProvisioning = "../deploy/kubernetes/grafana/provisioning.yaml"
	grafanaDeployment   = "../deploy/kubernetes/grafana/deployment.yaml"
	alertingConfigMap   = "grafana-alerting"
)

// TestDeployedCopies: the Kubernetes Grafana's alerting ConfigMap holds
// exactly rules/grafana's files, byte for byte, and the Grafana container
// gets every environment variable the contact points read.
func TestDeployedCopies(t *testing.T) {
	b, err := os.ReadFile(grafanaProvisioning)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]string
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "ConfigMap" && obj.Metadata.Name == alertingConfigMap {
			data = obj.Data
		}
	}
	if data == nil {
		t.Fatalf("%s: no ConfigMap %s with data", grafanaProvisioning, alertingConfigMap)
	}
	files := grafanaFiles(t)
	if got, want := slices.Sorted(maps.Keys(data)), slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
		t.Fatalf("ConfigMap %s has keys %v, rules/grafana has %v", alertingConfigMap, got, want)
	}
	for name, text := range files {
		if data[name] != string(text) {
			t.Errorf("ConfigMap %s, %s differs from rules/grafana/%s: copy it again (rules/README.md)", alertingConfigMap, name, name)
		}
	}

	dep, err := os.ReadFile(grafanaDeployment)
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range loadProvisioning(t).contacts {
		for _, r := range cp.Receivers {
			for _, v := range r.Settings {
				s, _ := v.(string)
				for _, m := range anyEnvRef.FindAllStringSubmatch(s, -1) {
					if !bytes.Contains(dep, []byte("- name: "+m[1]+"\n")) {
						t.Errorf("%s: the grafana container does not set %s, which contact point %s reads", grafanaDeployment, m[1], cp.Name)
					}
				}
			}
		}
	}
}
