package deploy

import (
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// want is what one rendering must hold.
type want struct {
	name         string // the StatefulSet, the API Service, the PDB, ...
	headless     string // the headless Service
	replicas     int32
	antiAffinity string // soft, hard or none
	tls          bool   // mutual TLS (else --insecure)
	perPodCerts  bool   // --tls-cert and --tls-key name $(RINGLIMIT_NAME)
	admin        bool   // --admin-token-file
	policy       bool   // --policy
	rls          bool   // --rls-config
	monitor      bool   // a ServiceMonitor
	memoryLimit  string // the container's limits.memory
	// external are the Secrets and ConfigMaps the pod mounts that the
	// rendering does not define (existingSecret, existingConfigMap).
	external []string
}

// The mount points the node's file flags point into.
const (
	tlsDir    = "/etc/ringlimit/tls"
	gossipDir = "/etc/ringlimit/gossip"
	adminDir  = "/etc/ringlimit/admin"
	policyDir = "/etc/ringlimit/policy"
	rlsDir    = "/etc/ringlimit/rls"
)

func check(t *testing.T, what string, got, want any) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	if g, w := fmt.Sprintf("%v", got), fmt.Sprintf("%v", want); len(g)+len(w) < 400 {
		t.Errorf("%s = %s, want %s", what, g, w)
	} else {
		t.Errorf("%s differs (-got +want):\n%s", what, diff.Diff(got, want))
	}
}

// flagValues reads --name=value and --name arguments: the last of a flag
// given twice wins, as with the node's flag package. A bare flag is "true".
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			t.Errorf("argument %q is not a --flag", a)
			continue
		}
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok {
			value = "true"
		}
		out[name] = value
	}
	return out
}

// container is the StatefulSet's one container.
func container(t *testing.T, sts *appsv1.StatefulSet) *corev1.Container {
	t.Helper()
	cs := sts.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "ringlimit" {
		t.Fatalf("StatefulSet %s: containers %v, want one named ringlimit", sts.Name, cs)
	}
	return &cs[0]
}

// seconds reads a flag's duration.
func seconds(t *testing.T, flags map[string]string, name string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := flags[name]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Errorf("--%s=%s: %v", name, v, err)
	}
	return d
}

// dataDir is where the node keeps its state file (--data-dir).
const dataDir = "/var/lib/ringlimit"

// checkDeployment asserts what the plain manifests and every rendering of
// the chart must agree on.
func checkDeployment(t *testing.T, o *objects, w want) {
	t.Helper()
	sts := o.statefulSet(t)
	spec := sts.Spec
	check(t, "StatefulSet name", sts.Name, w.name)
	if spec.Replicas == nil {
		t.Fatalf("StatefulSet %s: no replicas", sts.Name)
	}
	check(t, "replicas", *spec.Replicas, w.replicas)
	check(t, "serviceName", spec.ServiceName, w.headless)
	check(t, "podManagementPolicy", spec.PodManagementPolicy, appsv1.ParallelPodManagement)
	if spec.Selector == nil || len(spec.Selector.MatchLabels) == 0 || len(spec.Selector.MatchExpressions) != 0 {
		t.Fatalf("StatefulSet %s: selector %v, want matchLabels only", sts.Name, spec.Selector)
	}
	sel := spec.Selector.MatchLabels
	for k, v := range sel {
		if spec.Template.Labels[k] != v {
			t.Errorf("pod template labels %v do not carry selector label %s=%s", spec.Template.Labels, k, v)
		}
	}
	pod := spec.Template.Spec

	// Hardening.
	psc := pod.SecurityContext
	if psc == nil {
		t.Fatal("no pod securityContext")
	}
	check(t, "pod runAsNonRoot", psc.RunAsNonRoot, new(true))
	check(t, "pod runAsUser", psc.RunAsUser, new(int64(65532)))
	check(t, "pod seccompProfile", psc.SeccompProfile, &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault})
	check(t, "automountServiceAccountToken", pod.AutomountServiceAccountToken, new(false))
	check(t, "enableServiceLinks", pod.EnableServiceLinks, new(false))
	c := container(t, sts)
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no container securityContext")
	}
	check(t, "readOnlyRootFilesystem", sc.ReadOnlyRootFilesystem, new(true))
	check(t, "allowPrivilegeEscalation", sc.AllowPrivilegeEscalation, new(false))
	check(t, "runAsNonRoot", sc.RunAsNonRoot, new(true))
	check(t, "runAsUser", sc.RunAsUser, new(int64(65532)))
	check(t, "capabilities", sc.Capabilities, &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}})
	check(t, "seccompProfile", sc.SeccompProfile, &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault})
	if !strings.HasPrefix(c.Image, "ghcr.io/ringlimit/ringlimit-node:") {
		t.Errorf("image %q, want ghcr.io/ringlimit/ringlimit-node:TAG", c.Image)
	}

	// Ports.
	type port struct {
		name  string
		port  int32
		proto corev1.Protocol
	}
	var ports []port
	for _, p := range c.Ports {
		ports = append(ports, port{p.Name, p.ContainerPort, p.Protocol})
		if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
			t.Errorf("container port name %q: %v", p.Name, errs)
		}
	}
	check(t, "container ports", ports, []port{{"http", 8080, "TCP"}, {"grpc", 9090, "TCP"},
		{"peer", 9190, "TCP"}, {"gossip-tcp", 7946, "TCP"}, {"gossip-udp", 7946, "UDP"}})
	portOf := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		t.Errorf("no container port named %q", name)
		return 0
	}

	// Environment.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
	}
	fieldRef := func(name, path string) {
		t.Helper()
		e := env[name]
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path || e.Value != "" {
			t.Errorf("env %s = %+v, want a fieldRef to %s", name, e, path)
		}
	}
	fieldRef("POD_IP", "status.podIP")
	fieldRef("POD_NAMESPACE", "metadata.namespace")
	fieldRef("RINGLIMIT_NAME", "metadata.name")
	if e := env["GOMEMLIMIT"]; e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil {
		t.Errorf("env GOMEMLIMIT = %+v, want a resourceFieldRef", e)
	} else {
		r := e.ValueFrom.ResourceFieldRef
		check(t, "GOMEMLIMIT resource", r.Resource, "limits.memory")
		if r.ContainerName != "" && r.ContainerName != c.Name {
			t.Errorf("GOMEMLIMIT containerName %q", r.ContainerName)
		}
		if r.Divisor.Cmp(resource.MustParse("1")) != 0 {
			t.Errorf("GOMEMLIMIT divisor %s, want 1 (a plain byte count)", r.Divisor.String())
		}
	}
	mem, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Errorf("no memory limit (GOMEMLIMIT follows it)")
	} else {
		check(t, "limits.memory", mem.String(), w.memoryLimit)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		t.Errorf("no memory request")
	}

	// Probes.
	probe := func(what string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: %+v, want an httpGet", what, p)
			return
		}
		check(t, what+" path", p.HTTPGet.Path, path)
		check(t, what+" port", p.HTTPGet.Port, intstr.FromString("http"))
	}
	probe("readinessProbe", c.ReadinessProbe, "/readyz")
	probe("livenessProbe", c.LivenessProbe, "/healthz")
	probe("startupProbe", c.StartupProbe, "/healthz")
	if p := c.StartupProbe; p != nil {
		// Liveness starts once the node has answered; it gets 60 s to.
		check(t, "startupProbe allows", time.Duration(p.PeriodSeconds*p.FailureThreshold)*time.Second, 60*time.Second)
	}

	// Arguments.
	flags := flagValues(t, c.Args)
	if len(c.Command) != 0 {
		t.Errorf("command %q: the image's entrypoint is the node", c.Command)
	}
	for flag, portName := range map[string]string{"http": "http", "grpc": "grpc", "peer": "peer", "gossip": "gossip-tcp"} {
		host, p, err := net.SplitHostPort(flags[flag])
		if err != nil {
			t.Errorf("--%s=%q: %v", flag, flags[flag], err)
			continue
		}
		check(t, "--"+flag+" host", host, "0.0.0.0")
		check(t, "--"+flag+" port", p, strconv.Itoa(int(portOf(portName))))
	}
	check(t, "--join", flags["join"], "_gossip._tcp."+w.headless+".$(POD_NAMESPACE).svc.cluster.local")
	check(t, "--cluster-size", flags["cluster-size"], strconv.Itoa(int(w.replicas)))
	if flags["cluster-name"] == "" {
		t.Errorf("no --cluster-name")
	}
	drain := seconds(t, flags, "drain-delay", 0)
	if drain <= 0 {
		t.Errorf("--drain-delay=%q, want a positive delay", flags["drain-delay"])
	}
	shutdown := seconds(t, flags, "shutdown-timeout", 10*time.Second)
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Errorf("lifecycle %+v, want a preStop sleep", c.Lifecycle)
	} else {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		check(t, "preStop sleep seconds", c.Lifecycle.PreStop.Sleep.Seconds, int64(5))
		if h := c.Lifecycle.PreStop; h.Exec != nil || h.HTTPGet != nil || h.TCPSocket != nil {
			t.Errorf("preStop %+v: a sleep only", h)
		}
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil {
		t.Errorf("no terminationGracePeriodSeconds")
	} else if grace := time.Duration(*g) * time.Second; grace <= preStop+drain+shutdown {
		t.Errorf("terminationGracePeriodSeconds %v does not exceed preStop %v + --drain-delay %v + --shutdown-timeout %v", grace, preStop, drain, shutdown)
	}

	// Files: each file flag points into the mount of the volume it needs.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("volumeMount %s uses a subPath, which never sees an update", m.Name)
		}
		if !m.ReadOnly && m.MountPath != dataDir { // the state file's directory is the one the node writes
			t.Errorf("volumeMount %s is writable", m.Name)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, pvc := range sts.Spec.VolumeClaimTemplates { // a volume of its own per pod
		volumes[pvc.Name] = corev1.Volume{Name: pvc.Name}
	}
	if m, ok := mounts[dataDir]; !ok || m.ReadOnly || flags["data-dir"] != dataDir {
		t.Errorf("--data-dir=%q with %s mounted %+v, want --data-dir=%s on a writable volume", flags["data-dir"], dataDir, m, dataDir)
	} else if _, ok := volumes[m.Name]; !ok {
		t.Errorf("volumeMount %s: no such volume", m.Name)
	}
	inMount := func(flag, dir, file string, on bool) {
		t.Helper()
		v, given := flags[flag]
		if !on {
			if given {
				t.Errorf("--%s=%s given, want none", flag, v)
			}
			if _, ok := mounts[dir]; ok {
				t.Errorf("%s mounted without --%s", dir, flag)
			}
			return
		}
		check(t, "--"+flag, v, dir+file)
		m, ok := mounts[dir]
		if !ok {
			t.Errorf("--%s=%s: nothing mounted at %s", flag, v, dir)
			return
		}
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("volumeMount %s: no such volume", m.Name)
		}
	}
	inMount("tls-ca", tlsDir, "/ca.crt", w.tls)
	if w.perPodCerts {
		inMount("tls-cert", tlsDir, "/$(RINGLIMIT_NAME).crt", w.tls)
		inMount("tls-key", tlsDir, "/$(RINGLIMIT_NAME).key", w.tls)
	} else {
		inMount("tls-cert", tlsDir, "/tls.crt", w.tls)
		inMount("tls-key", tlsDir, "/tls.key", w.tls)
	}
	check(t, "--insecure", flags["insecure"] == "true", !w.tls)
	inMount("gossip-key-file", gossipDir, "/gossip.key", true)
	inMount("admin-token-file", adminDir, "/tokens", w.admin)
	inMount("policy", policyDir, "/policy.yaml", w.policy)
	inMount("rls-config", rlsDir, "", w.rls)
	// Every Secret and ConfigMap the pod mounts is defined here, or named
	// as external; keys stay readable only by the pod's group.
	var mounted []string
	for _, v := range pod.Volumes {
		switch {
		case v.Secret != nil:
			mounted = append(mounted, v.Secret.SecretName)
			if _, ok := o.secrets[v.Secret.SecretName]; !ok && !slices.Contains(w.external, v.Secret.SecretName) {
				t.Errorf("volume %s: Secret %s is not defined", v.Name, v.Secret.SecretName)
			}
			if m := v.Secret.DefaultMode; m == nil || *m&0o007 != 0 {
				t.Errorf("volume %s: defaultMode %v, want none for others", v.Name, m)
			}
		case v.ConfigMap != nil:
			mounted = append(mounted, v.ConfigMap.Name)
			if _, ok := o.configMaps[v.ConfigMap.Name]; !ok && !slices.Contains(w.external, v.ConfigMap.Name) {
				t.Errorf("volume %s: ConfigMap %s is not defined", v.Name, v.ConfigMap.Name)
			}
		}
	}
	for _, e := range w.external {
		if !slices.Contains(mounted, e) {
			t.Errorf("external %s is not mounted", e)
		}
		if _, ok := o.secrets[e]; ok {
			t.Errorf("external Secret %s is defined by the rendering too", e)
		}
		if _, ok := o.configMaps[e]; ok {
			t.Errorf("external ConfigMap %s is defined by the rendering too", e)
		}
	}

	// Anti-affinity.
	var aff *corev1.PodAntiAffinity
	if pod.Affinity != nil {
		aff = pod.Affinity.PodAntiAffinity
	}
	selects := func(what string, ls map[string]string) {
		t.Helper()
		check(t, what, ls, sel)
	}
	switch w.antiAffinity {
	case "soft":
		if aff == nil || len(aff.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(aff.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Fatalf("podAntiAffinity %+v, want one preferred term", aff)
		}
		term := aff.PreferredDuringSchedulingIgnoredDuringExecution[0]
		check(t, "anti-affinity weight", term.Weight, int32(100))
		check(t, "anti-affinity topologyKey", term.PodAffinityTerm.TopologyKey, "kubernetes.io/hostname")
		selects("anti-affinity labelSelector", term.PodAffinityTerm.LabelSelector.MatchLabels)
	case "hard":
		if aff == nil || len(aff.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(aff.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Fatalf("podAntiAffinity %+v, want one required term", aff)
		}
		term := aff.RequiredDuringSchedulingIgnoredDuringExecution[0]
		check(t, "anti-affinity topologyKey", term.TopologyKey, "kubernetes.io/hostname")
		selects("anti-affinity labelSelector", term.LabelSelector.MatchLabels)
	default:
		t.Fatalf("want.antiAffinity %q", w.antiAffinity)
	}

	// The headless Service: discovery through the SRV name --join reads.
	hl := o.services[w.headless]
	if hl == nil {
		t.Fatalf("no Service %s", w.headless)
	}
	check(t, "headless clusterIP", hl.Spec.ClusterIP, corev1.ClusterIPNone)
	check(t, "headless publishNotReadyAddresses", hl.Spec.PublishNotReadyAddresses, true)
	check(t, "headless selector", hl.Spec.Selector, sel)
	type svcPort struct {
		name   string
		port   int32
		proto  corev1.Protocol
		target int32
	}
	servicePorts := func(s *corev1.Service) []svcPort {
		var out []svcPort
		for _, p := range s.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				t.Errorf("Service %s port %s: targetPort %v, want a container port name", s.Name, p.Name, p.TargetPort)
			}
			out = append(out, svcPort{p.Name, p.Port, p.Protocol, portOf(p.TargetPort.StrVal)})
		}
		return out
	}
	check(t, "headless ports", servicePorts(hl), []svcPort{{"gossip", 7946, "TCP", 7946}, {"gossip-udp", 7946, "UDP", 7946}, {"peer", 9190, "TCP", 9190}})

	// The API Service.
	api := o.services[w.name]
	if api == nil {
		t.Fatalf("no Service %s", w.name)
	}
	check(t, "API Service type", api.Spec.Type, corev1.ServiceTypeClusterIP)
	check(t, "API Service selector", api.Spec.Selector, sel)
	check(t, "API Service ports", servicePorts(api), []svcPort{{"http", 8080, "TCP", 8080}, {"grpc", 9090, "TCP", 9090}})
	check(t, "grpc appProtocol", api.Spec.Ports[1].AppProtocol, new("grpc"))
	if len(o.services) != 2 {
		t.Errorf("Services %v, want %s and %s", sortedKeys(o.services), w.name, w.headless)
	}

	// The PodDisruptionBudget.
	if len(o.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(o.pdbs))
	}
	pdb := o.pdbs[0]
	check(t, "PDB name", pdb.Name, w.name)
	check(t, "PDB maxUnavailable", pdb.Spec.MaxUnavailable, new(intstr.FromInt32(1)))
	check(t, "PDB minAvailable", pdb.Spec.MinAvailable, (*intstr.IntOrString)(nil))
	selects("PDB selector", pdb.Spec.Selector.MatchLabels)

	checkNetworkPolicy(t, o, sel)

	// The ServiceMonitor scrapes /metrics on the http port of the API
	// Service, not the headless one.
	if !w.monitor {
		if len(o.serviceMonitors) != 0 {
			t.Errorf("%d ServiceMonitors, want none", len(o.serviceMonitors))
		}
	} else if len(o.serviceMonitors) != 1 {
		t.Errorf("%d ServiceMonitors, want 1", len(o.serviceMonitors))
	} else {
		sm := o.serviceMonitors[0]
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor endpoints %+v, want 1", sm.Spec.Endpoints)
		}
		check(t, "ServiceMonitor port", sm.Spec.Endpoints[0].Port, "http")
		check(t, "ServiceMonitor path", sm.Spec.Endpoints[0].Path, "/metrics")
		matches := func(s *corev1.Service) bool {
			for k, v := range sm.Spec.Selector.MatchLabels {
				if s.Labels[k] != v {
					return false
				}
			}
			return len(sm.Spec.Selector.MatchExpressions) == 0
		}
		check(t, "ServiceMonitor selects the API Service", matches(api), true)
		check(t, "ServiceMonitor selects the headless Service", matches(hl), false)
	}
}

// checkNetworkPolicy asserts that the peer and gossip ports admit only the
// pods of sel, and that the public ports stay open.
func checkNetworkPolicy(t *testing.T, o *objects, sel map[string]string) {
	t.Helper()
	if len(o.networkPolicies) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(o.networkPolicies))
	}
	np := o.networkPolicies[0]
	check(t, "NetworkPolicy podSelector", np.Spec.PodSelector.MatchLabels, sel)
	check(t, "NetworkPolicy policyTypes", np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress})
	internal := map[string]bool{"9190/TCP": true, "7946/TCP": true, "7946/UDP": true}
	public := map[string]bool{"8080/TCP": true, "9090/TCP": true}
	seen := map[string]bool{}
	for i, rule := range np.Spec.Ingress {
		if len(rule.Ports) == 0 {
			t.Errorf("ingress rule %d admits every port", i)
		}
		var ports []string
		for _, p := range rule.Ports {
			if p.Port == nil || p.Port.Type != intstr.Int || p.Protocol == nil || p.EndPort != nil {
				t.Errorf("ingress rule %d: port %+v, want a number and a protocol", i, p)
				continue
			}
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port.IntVal, *p.Protocol))
		}
		slices.Sort(ports)
		isInternal := slices.ContainsFunc(ports, func(p string) bool { return internal[p] })
		if isInternal {
			check(t, fmt.Sprintf("ingress rule %d ports", i), ports, slices.Sorted(maps.Keys(internal)))
			if len(rule.From) != 1 || rule.From[0].NamespaceSelector != nil || rule.From[0].IPBlock != nil || rule.From[0].PodSelector == nil {
				t.Errorf("ingress rule %d to the peer and gossip ports: from %+v, want the nodes' podSelector only", i, rule.From)
			} else {
				check(t, fmt.Sprintf("ingress rule %d podSelector", i), rule.From[0].PodSelector.MatchLabels, sel)
			}
		} else {
			for _, p := range ports {
				if !public[p] {
					t.Errorf("ingress rule %d admits %s", i, p)
				}
			}
		}
		for _, p := range ports {
			seen[p] = true
		}
	}
	check(t, "ports the NetworkPolicy admits", slices.Sorted(maps.Keys(seen)), []string{"7946/TCP", "7946/UDP", "8080/TCP", "9090/TCP", "9190/TCP"})
}
