package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const manifestDir = "kubernetes"

// loadManifests decodes every YAML file of kubernetes/ and checks that
// kustomization.yaml lists all of them but secrets.yaml.
func loadManifests(t *testing.T) *objects {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(manifestDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	check(t, "kustomization kind", k.Kind, "Kustomization")
	o := newObjects("kubernetes")
	var listed []string
	for _, f := range files {
		base := filepath.Base(f)
		if base == "kustomization.yaml" {
			continue
		}
		if base != "secrets.yaml" {
			listed = append(listed, base)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		o.decodeInto(t, base, data)
	}
	check(t, "kustomization resources", slices.Sorted(slices.Values(k.Resources)), listed)
	return o
}

// plainFixtures stand in for the placeholder Secrets.
func plainFixtures(t *testing.T) fixtures {
	return fixtures{
		"ringlimit-tls":    sharedCert(t, podNames("ringlimit", 3)...),
		"ringlimit-gossip": {"gossip.key": []byte(newGossipKey(t) + "\n")},
		"ringlimit-admin":  {"tokens": []byte("ops:0123456789abcdef0123456789\n")},
	}
}

var plainWant = want{name: "ringlimit", headless: "ringlimit-headless", replicas: 3, antiAffinity: "soft",
	tls: true, admin: true, policy: true, rls: true, monitor: true, memoryLimit: "256Mi"}

func TestManifests(t *testing.T) {
	o := loadManifests(t)
	checkDeployment(t, o, plainWant)
	checkNode(t, o, namespace, plainFixtures(t))
}

// The Secrets are placeholders, marked, and a node given them refuses to
// start: validate-flags already fails on the gossip key file.
func TestManifestSecretsArePlaceholders(t *testing.T) {
	o := loadManifests(t)
	check(t, "Secrets", sortedKeys(o.secrets), []string{"ringlimit-admin", "ringlimit-gossip", "ringlimit-tls"})
	for name, s := range o.secrets {
		files := secretFiles(s)
		if len(files) == 0 {
			t.Errorf("Secret %s is empty", name)
		}
		for key, v := range files {
			if !strings.Contains(string(v), "REPLACE-ME") {
				t.Errorf("Secret %s: %s is not marked REPLACE-ME", name, key)
			}
		}
	}
	check(t, "ringlimit-tls files", sortedKeys(o.secrets["ringlimit-tls"].StringData), []string{"ca.crt", "tls.crt", "tls.key"})
	needNode(t)
	p := newPod(t, o, 0, namespace, nil)
	if code, out := validateFlags(t, p.args, p.env); code != 2 || !strings.Contains(out, "gossip-key-file") {
		t.Errorf("validate-flags with the placeholder Secrets: exit %d: %s", code, out)
	}
}

// The chart with its default values, released as "ringlimit", renders the
// plain manifests' objects: the two stay in step.
func TestManifestsMatchChart(t *testing.T) {
	plain := loadManifests(t)
	chart := renderRelease(t, "ringlimit", "", monitoringCaps())

	ps, cs := plain.statefulSet(t), chart.statefulSet(t)
	check(t, "StatefulSet spec (but the pod annotations)", func() any {
		s := cs.Spec.DeepCopy()
		s.Template.Annotations = nil
		return *s
	}(), ps.Spec)
	for _, name := range sortedKeys(plain.services) {
		if c, ok := chart.services[name]; !ok {
			t.Errorf("chart: no Service %s", name)
		} else {
			check(t, "Service "+name+" spec", c.Spec, plain.services[name].Spec)
		}
	}
	for _, name := range sortedKeys(plain.configMaps) {
		if c, ok := chart.configMaps[name]; !ok {
			t.Errorf("chart: no ConfigMap %s", name)
		} else {
			check(t, "ConfigMap "+name+" data", c.Data, plain.configMaps[name].Data)
		}
	}
	for _, name := range sortedKeys(plain.secrets) {
		c, ok := chart.secrets[name]
		if !ok {
			t.Errorf("chart: no Secret %s", name)
			continue
		}
		check(t, "Secret "+name+" type", c.Type, plain.secrets[name].Type)
		check(t, "Secret "+name+" files", sortedKeys(c.Data), sortedKeys(secretFiles(plain.secrets[name])))
	}
	check(t, "PDB spec", chart.pdbs[0].Spec, plain.pdbs[0].Spec)
	check(t, "NetworkPolicy spec", chart.networkPolicies[0].Spec, plain.networkPolicies[0].Spec)
	check(t, "ServiceMonitor spec", chart.serviceMonitors[0].Spec, plain.serviceMonitors[0].Spec)
}

// The other way secrets.yaml describes: cmd/devcerts' certificates, one per
// pod, each node pointed at its own pair.
func TestManifestsWithDevcerts(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(manifestDir, "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	swap := map[string]string{
		"--tls-cert=/etc/ringlimit/tls/tls.crt": "--tls-cert=/etc/ringlimit/tls/$(RINGLIMIT_NAME).crt",
		"--tls-key=/etc/ringlimit/tls/tls.key":  "--tls-key=/etc/ringlimit/tls/$(RINGLIMIT_NAME).key",
	}
	for _, arg := range swap {
		if !strings.Contains(string(doc), "- "+arg+"\n") {
			t.Errorf("secrets.yaml does not tell to use %s", arg)
		}
	}
	o := loadManifests(t)
	c := container(t, o.statefulSet(t))
	for i, a := range c.Args {
		if b, ok := swap[a]; ok {
			c.Args[i] = b
			delete(swap, a)
		}
	}
	if len(swap) > 0 {
		t.Fatalf("statefulset.yaml lacks %v", swap)
	}
	w := plainWant
	w.perPodCerts = true
	checkDeployment(t, o, w)
	fix := plainFixtures(t)
	fix["ringlimit-tls"] = devcerts(t, podNames("ringlimit", 3)...)
	checkNode(t, o, namespace, fix)
}
