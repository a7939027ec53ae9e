package deploy

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// cluster is a fake API server for the chart's lookup function: what
// `helm upgrade` would find in the namespace.
type cluster struct {
	client *dynamicfake.FakeDynamicClient
}

func newCluster() *cluster {
	return &cluster{client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}
}

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

func (c *cluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	if apiVersion != "v1" || kind != "Secret" {
		return nil, false, fmt.Errorf("the fake cluster has Secrets only, not %s %s", apiVersion, kind)
	}
	return c.client.Resource(secretsGVR), true, nil
}

// apply stores the Secrets of o, replacing those of the same name.
func (c *cluster) apply(t *testing.T, o *objects) {
	t.Helper()
	for _, s := range o.secrets {
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := json.Unmarshal(data, &u.Object); err != nil {
			t.Fatal(err)
		}
		res := c.client.Resource(secretsGVR).Namespace(namespace)
		_ = res.Delete(context.Background(), s.Name, metav1.DeleteOptions{})
		if _, err := res.Create(context.Background(), &u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func (c *cluster) delete(t *testing.T, name string) {
	t.Helper()
	if err := c.client.Resource(secretsGVR).Namespace(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// renderIn renders the chart as an upgrade in c.
func renderIn(t *testing.T, c *cluster, values string) *objects {
	t.Helper()
	ch := loadChart(t)
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 2, IsUpgrade: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.RenderWithClientProvider(ch, rv, c)
	if err != nil {
		t.Fatal(err)
	}
	return decodeRendered(t, out)
}

func leafOf(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatalf("Secret %s: tls.crt has no PEM", s.Name)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestChartKeepsGeneratedSecrets: an upgrade keeps the generated CA, node
// certificate, gossip key and admin token; a new node certificate from the
// same CA is issued when the pods change or the certificate nears its end.
func TestChartKeepsGeneratedSecrets(t *testing.T) {
	const (
		tlsName = "rl-ringlimit-tls"
		caName  = "rl-ringlimit-tls-ca"
	)
	c := newCluster()
	first := renderIn(t, c, "")
	c.apply(t, first)

	same := renderIn(t, c, "")
	for name, s := range first.secrets {
		check(t, "Secret "+name+" data after an upgrade", same.secrets[name].Data, s.Data)
		check(t, "Secret "+name+" annotations after an upgrade", same.secrets[name].Annotations, s.Annotations)
	}

	// Five pods: a new certificate naming them all, from the same CA.
	five := renderIn(t, c, "replicaCount: 5")
	checkDeployment(t, five, want{name: "rl-ringlimit", headless: "rl-ringlimit-headless", replicas: 5, antiAffinity: "soft",
		tls: true, admin: true, policy: true, rls: true, memoryLimit: "256Mi"})
	checkNode(t, five, namespace, nil) // every pod's certificate, against ca.crt
	check(t, "CA after scaling", five.secrets[caName].Data, first.secrets[caName].Data)
	check(t, "ca.crt after scaling", five.secrets[tlsName].Data["ca.crt"], first.secrets[tlsName].Data["ca.crt"])
	check(t, "certificate names after scaling", leafOf(t, five.secrets[tlsName]).DNSNames, podNames("rl-ringlimit", 5))
	for _, name := range []string{"rl-ringlimit-gossip", "rl-ringlimit-admin"} {
		check(t, "Secret "+name+" after scaling", five.secrets[name].Data, first.secrets[name].Data)
	}

	// A certificate with 10 days left is replaced, from the same CA.
	near := first.secrets[tlsName].DeepCopy()
	near.Annotations["ringlimit.io/not-after"] = strconv.FormatInt(time.Now().Add(10*24*time.Hour).Unix(), 10)
	c.apply(t, &objects{secrets: map[string]*corev1.Secret{tlsName: near}})
	renewed := renderIn(t, c, "")
	checkNode(t, renewed, namespace, nil)
	if string(renewed.secrets[tlsName].Data["tls.crt"]) == string(first.secrets[tlsName].Data["tls.crt"]) {
		t.Errorf("a certificate with 10 days left was kept")
	}
	check(t, "CA after a renewal", renewed.secrets[caName].Data, first.secrets[caName].Data)

	// Without the CA, a new CA and a new certificate.
	c.apply(t, first)
	c.delete(t, caName)
	fresh := renderIn(t, c, "")
	checkNode(t, fresh, namespace, nil)
	if strings.EqualFold(string(fresh.secrets[caName].Data["tls.crt"]), string(first.secrets[caName].Data["tls.crt"])) {
		t.Errorf("the CA is the same after its Secret was deleted")
	}
}
