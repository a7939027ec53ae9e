// Package deploy tests the Kubernetes manifests in kubernetes/ and the Helm
// chart in helm/ringlimit: both are decoded strictly into the Kubernetes API
// types, checked by the same assertions, and the node's arguments are run
// through `ringlimit-node validate-flags` with the files they name.
package deploy

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// manifests use; decoding is strict, so any other field fails the test.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string         `json:"port"`
			Path          string         `json:"path"`
			Interval      string         `json:"interval,omitempty"`
			Scheme        string         `json:"scheme,omitempty"`
			Authorization map[string]any `json:"authorization,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is the part of monitoring.coreos.com/v1 PrometheusRule the
// chart uses; decoding is strict.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Record      string            `json:"record,omitempty"`
				Alert       string            `json:"alert,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// objects are the Kubernetes objects of one rendering.
type objects struct {
	source          string
	statefulSets    []*appsv1.StatefulSet
	services        map[string]*corev1.Service
	secrets         map[string]*corev1.Secret
	configMaps      map[string]*corev1.ConfigMap
	pdbs            []*policyv1.PodDisruptionBudget
	networkPolicies []*networkingv1.NetworkPolicy
	serviceMonitors []*serviceMonitor
	prometheusRules []*prometheusRule
	pods            map[string]*corev1.Pod // helm test pods
}

// statefulSet is the one StatefulSet.
func (o *objects) statefulSet(t *testing.T) *appsv1.StatefulSet {
	t.Helper()
	if len(o.statefulSets) != 1 {
		t.Fatalf("%s: %d StatefulSets, want 1", o.source, len(o.statefulSets))
	}
	return o.statefulSets[0]
}

// splitDocuments splits a multi-document YAML stream at its "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	for line := range strings.SplitAfterSeq(string(data), "\n") {
		if strings.TrimRight(line, " \t\r\n") == "---" {
			docs = append(docs, bytes.Clone(cur.Bytes()))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.Bytes())
}

// apiVersions is the apiVersion each kind must have.
var apiVersions = map[string]string{
	"StatefulSet":         "apps/v1",
	"Service":             "v1",
	"Secret":              "v1",
	"ConfigMap":           "v1",
	"PodDisruptionBudget": "policy/v1",
	"NetworkPolicy":       "networking.k8s.io/v1",
	"ServiceMonitor":      "monitoring.coreos.com/v1",
	"PrometheusRule":      "monitoring.coreos.com/v1",
	"Pod":                 "v1",
}

// decodeInto adds the objects of a YAML stream (named source in errors) to
// o, each decoded strictly: an unknown or repeated field fails.
func (o *objects) decodeInto(t *testing.T, source string, data []byte) {
	t.Helper()
	for i, doc := range splitDocuments(data) {
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			t.Fatalf("%s: document %d: %v", source, i, err)
		}
		if len(probe) == 0 {
			continue // comments only
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: document %d: %v", source, i, err)
		}
		where := fmt.Sprintf("%s: %s %v", source, tm.Kind, probe["metadata"])
		if want, ok := apiVersions[tm.Kind]; !ok {
			t.Fatalf("%s: unexpected kind %q", where, tm.Kind)
		} else if tm.APIVersion != want {
			t.Fatalf("%s: apiVersion %q, want %q", where, tm.APIVersion, want)
		}
		strict := func(v any) {
			t.Helper()
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		}
		var meta *metav1.ObjectMeta
		switch tm.Kind {
		case "StatefulSet":
			v := new(appsv1.StatefulSet)
			strict(v)
			o.statefulSets = append(o.statefulSets, v)
			meta = &v.ObjectMeta
		case "Service":
			v := new(corev1.Service)
			strict(v)
			addNamed(t, where, o.services, v.Name, v)
			meta = &v.ObjectMeta
		case "Secret":
			v := new(corev1.Secret)
			strict(v)
			addNamed(t, where, o.secrets, v.Name, v)
			meta = &v.ObjectMeta
		case "ConfigMap":
			v := new(corev1.ConfigMap)
			strict(v)
			addNamed(t, where, o.configMaps, v.Name, v)
			meta = &v.ObjectMeta
		case "PodDisruptionBudget":
			v := new(policyv1.PodDisruptionBudget)
			strict(v)
			o.pdbs = append(o.pdbs, v)
			meta = &v.ObjectMeta
		case "NetworkPolicy":
			v := new(networkingv1.NetworkPolicy)
			strict(v)
			o.networkPolicies = append(o.networkPolicies, v)
			meta = &v.ObjectMeta
		case "ServiceMonitor":
			v := new(serviceMonitor)
			strict(v)
			o.serviceMonitors = append(o.serviceMonitors, v)
			meta = &v.ObjectMeta
		case "PrometheusRule":
			v := new(prometheusRule)
			strict(v)
			o.prometheusRules = append(o.prometheusRules, v)
			meta = &v.ObjectMeta
		case "Pod":
			v := new(corev1.Pod)
			strict(v)
			addNamed(t, where, o.pods, v.Name, v)
			meta = &v.ObjectMeta
		}
		if meta.Name == "" {
			t.Errorf("%s: no metadata.name", where)
		}
		if meta.Namespace != "" {
			t.Errorf("%s: metadata.namespace %q: the manifests must not name a namespace", where, meta.Namespace)
		}
	}
}

func newObjects(source string) *objects {
	return &objects{source: source, services: map[string]*corev1.Service{},
		secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}, pods: map[string]*corev1.Pod{}}
}

// addNamed puts v in m under name, refusing a second object of that kind
// and name.
func addNamed[T any](t *testing.T, where string, m map[string]T, name string, v T) {
	t.Helper()
	if _, dup := m[name]; dup {
		t.Fatalf("%s: defined twice", where)
	}
	m[name] = v
}

// secretFiles is what a Secret's volume shows: data and stringData.
func secretFiles(s *corev1.Secret) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range s.Data {
		out[k] = v
	}
	for k, v := range s.StringData {
		out[k] = []byte(v)
	}
	return out
}

func configMapFiles(c *corev1.ConfigMap) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range c.Data {
		out[k] = []byte(v)
	}
	for k, v := range c.BinaryData {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
