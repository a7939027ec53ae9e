package main

// Network faults between node processes on loopback: every node is started
// inside its own cgroup (v2), and iptables drops the packets a node's
// sockets send to another node's gRPC and gossip ports. The test process,
// in no such cgroup, still reaches every node. Needs root, a cgroup2 mount
// and an iptables whose cgroup match works; without them the tests skip,
// except under CI=true, where they fail.

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// skipOrFail skips the test for a missing tool or privilege, or fails it
// under CI, which must run every fault test.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, cannot skip: "+format, args...)
	}
	t.Skipf(format, args...)
}

// netFault cuts and heals links between node processes. Not safe for
// concurrent use: one test goroutine drives it.
type netFault struct {
	t     *testing.T
	ipt   string              // the iptables binary whose cgroup match drops
	tag   string              // comment on every rule: ringlimit-test-<pid>
	root  string              // cgroup2 mount point
	dir   string              // root/tag: the cgroups of this test process
	cg    map[string]*os.File // node name → its open cgroup directory
	rules [][]string          // rules added and not yet removed
}

// newNetFault finds the cgroup2 mount and a working iptables, removes what
// earlier test processes that died left behind, and removes in t.Cleanup
// every rule and cgroup it creates. Create it before the processes: their
// cleanups must run first.
func newNetFault(t *testing.T) *netFault {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "iptables and cgroups need root, running as uid %d", os.Geteuid())
	}
	root := cgroup2Root()
	if root == "" {
		skipOrFail(t, "no cgroup2 mount in /proc/mounts")
	}
	f := &netFault{t: t, tag: fmt.Sprintf("ringlimit-test-%d", os.Getpid()), root: root, cg: map[string]*os.File{}}
	f.dir = filepath.Join(root, f.tag)
	f.sweep()
	if err := os.Mkdir(f.dir, 0o755); err != nil && !os.IsExist(err) {
		skipOrFail(t, "create cgroup: %v", err)
	}
	t.Cleanup(f.cleanup)
	var tried []string
	for _, name := range iptablesFlavours {
		bin := findBin(name)
		if bin == "" {
			continue
		}
		if err := f.probe(bin); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", bin, err))
			continue
		}
		f.ipt = bin
		return f
	}
	skipOrFail(t, "no iptables whose cgroup match drops packets (apt-get install iptables): %v", tried)
	return nil
}

// iptablesFlavours are tried in this order: the system's choice first.
var iptablesFlavours = []string{"iptables", "iptables-legacy", "iptables-nft"}

// findBin looks name up in PATH, then in /usr/sbin (not always in PATH).
func findBin(name string) string {
	if bin, err := exec.LookPath(name); err == nil {
		return bin
	}
	if _, err := os.Stat("/usr/sbin/" + name); err == nil {
		return "/usr/sbin/" + name
	}
	return ""
}

// cgroup2Root returns the mount point of the cgroup2 hierarchy, or "".
func cgroup2Root() string {
	mounts, err := os.Open("/proc/mounts")
	if err != nil {
		return ""
	}
	defer mounts.Close()
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

// iptables runs bin with args (waiting for the xtables lock).
func (f *netFault) iptables(bin string, args ...string) error {
	out, err := exec.Command(bin, append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return nil
}

// probe tells whether bin's cgroup match drops a connection from a process
// started in a probe cgroup to a listener of this process.
func (f *netFault) probe(bin string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	rule := []string{"OUTPUT", "-m", "cgroup", "--path", f.tag + "/probe", "-d", "127.0.0.1", "-p", "tcp", "--dport", port,
		"-m", "comment", "--comment", f.tag, "-j", "DROP"}
	if _, err := f.cgroup("probe"); err != nil {
		return err
	}
	if err := f.iptables(bin, append([]string{"-I"}, rule...)...); err != nil {
		return err
	}
	defer f.iptables(bin, append([]string{"-D"}, rule...)...)
	switch ok, err := f.connects("probe", ln.Addr().String()); {
	case err != nil:
		return err
	case ok:
		return errors.New("the rule was added but the connection went through")
	}
	return nil
}

// connects tells whether a process started in the cgroup of name connects
// to the TCP address addr within 500ms (false: its packets are dropped).
// A refused connection is an error.
func (f *netFault) connects(name, addr string) (bool, error) {
	cg, err := f.cgroup(name)
	if err != nil {
		return false, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	cmd := exec.Command("bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("start a connection probe in cgroup %s: %w", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			return false, fmt.Errorf("connection probe from cgroup %s to %s: %w", name, addr, err)
		}
		return true, nil
	case <-time.After(500 * time.Millisecond):
		cmd.Process.Kill()
		<-exited
		return false, nil
	}
}

// cgroup returns the open directory of node name's cgroup, creating it.
func (f *netFault) cgroup(name string) (*os.File, error) {
	if d, ok := f.cg[name]; ok {
		return d, nil
	}
	p := filepath.Join(f.dir, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, err
	}
	d, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	f.cg[name] = d
	return d, nil
}

// cut drops, both ways, x's traffic to the others' gRPC and gossip ports.
// Every proc must have been started in f's cgroup of its name.
func (f *netFault) cut(t *testing.T, x *proc, others ...*proc) {
	t.Helper()
	for _, o := range others {
		f.drop(t, x, o)
		f.drop(t, o, x)
	}
}

// drop adds the rules that drop what a's sockets send to b's ports.
func (f *netFault) drop(t *testing.T, a, b *proc) {
	t.Helper()
	if _, ok := f.cg[a.name]; !ok {
		t.Fatalf("%s was not started in a cgroup of this test", a.name)
	}
	for _, to := range []struct{ proto, addr string }{{"tcp", b.grpc}, {"tcp", b.gossip}, {"udp", b.gossip}} {
		_, port, err := net.SplitHostPort(to.addr)
		if err != nil {
			t.Fatal(err)
		}
		rule := []string{"OUTPUT", "-m", "cgroup", "--path", f.tag + "/" + a.name, "-d", "127.0.0.1", "-p", to.proto, "--dport", port,
			"-m", "comment", "--comment", f.tag, "-j", "DROP"}
		if err := f.iptables(f.ipt, append([]string{"-I"}, rule...)...); err != nil {
			t.Fatal(err)
		}
		f.rules = append(f.rules, rule)
	}
}

// heal removes exactly the rules cut added.
func (f *netFault) heal(t *testing.T) {
	t.Helper()
	for len(f.rules) > 0 {
		rule := f.rules[len(f.rules)-1]
		if err := f.iptables(f.ipt, append([]string{"-D"}, rule...)...); err != nil {
			t.Fatal(err)
		}
		f.rules = f.rules[:len(f.rules)-1]
	}
}

// leftovers returns the OUTPUT rules carrying this process's tag.
func (f *netFault) leftovers(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(f.ipt, "-w", "5", "-S", "OUTPUT").Output()
	if err != nil {
		t.Fatalf("%s -S OUTPUT: %v", f.ipt, err)
	}
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "--comment "+f.tag+" ") || strings.HasSuffix(l, "--comment "+f.tag) {
			rules = append(rules, l)
		}
	}
	return rules
}

// cleanup removes every rule and cgroup of this test process, leftovers
// included. It runs after the processes in the cgroups have exited.
func (f *netFault) cleanup() {
	if f.ipt != "" {
		f.heal(f.t)
		for _, l := range f.leftovers(f.t) {
			f.t.Errorf("rule left after heal, removing it: %s", l)
			if err := f.iptables(f.ipt, append([]string{"-D"}, strings.Fields(l)[1:]...)...); err != nil {
				f.t.Error(err)
			}
		}
	}
	for _, d := range f.cg {
		d.Close()
	}
	if err := removeCgroups(f.dir); err != nil {
		f.t.Error(err)
	}
}

// removeCgroups removes the cgroup dir and its children, retrying for a
// while: a cgroup is busy until its last process has been reaped.
func removeCgroups(dir string) error {
	var err error
	testkit.Poll(5*time.Second, func() bool {
		err = nil
		children, _ := filepath.Glob(filepath.Join(dir, "*", "cgroup.procs"))
		for _, c := range children {
			if e := os.Remove(filepath.Dir(c)); e != nil && !os.IsNotExist(e) {
				err = e
			}
		}
		if e := os.Remove(dir); e != nil && !os.IsNotExist(e) {
			err = e
		}
		return err == nil
	})
	return err
}

// sweep removes the rules and cgroups of test processes that no longer
// run (killed before their cleanups ran).
func (f *netFault) sweep() {
	dead := func(tag string) bool {
		pid, err := strconv.Atoi(strings.TrimPrefix(tag, "ringlimit-test-"))
		return err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH
	}
	dirs, _ := filepath.Glob(filepath.Join(f.root, "ringlimit-test-*"))
	for _, d := range dirs {
		if dead(filepath.Base(d)) {
			removeCgroups(d)
		}
	}
	for _, name := range iptablesFlavours {
		bin := findBin(name)
		if bin == "" {
			continue
		}
		out, err := exec.Command(bin, "-w", "5", "-S", "OUTPUT").Output()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			fields := strings.Fields(l)
			for i, w := range fields {
				if w == "--comment" && i+1 < len(fields) && strings.HasPrefix(fields[i+1], "ringlimit-test-") && dead(fields[i+1]) {
					exec.Command(bin, append([]string{"-w", "5", "-D"}, fields[1:]...)...).Run()
				}
			}
		}
	}
}

// procSpec says how startFaultProc starts a node: "" addresses are
// 127.0.0.1:0; a restart passes the ones the node had.
type procSpec struct {
	name, http, grpc, peer, gossip string
	join                           []string
	extra                          []string // more flags
}

// restartSpec is old's name and addresses, joining join.
func restartSpec(old *proc, join ...string) procSpec {
	return procSpec{name: old.name, http: old.http, grpc: old.grpc, peer: old.peer, gossip: old.gossip, join: join}
}

// startFaultProc is startProc with fixed addresses and, when f is not nil,
// started inside f's cgroup for the node's name (sockets belong to the
// cgroup they were created in, so the process must start there). It kills
// the process in t.Cleanup if it is still running.
func startFaultProc(t *testing.T, bin string, f *netFault, s procSpec) *proc {
	t.Helper()
	or := func(addr string) string {
		if addr == "" {
			return "127.0.0.1:0"
		}
		return addr
	}
	args := []string{"--name", s.name, "--http", or(s.http), "--grpc", or(s.grpc), "--peer", or(s.peer), "--gossip", or(s.gossip)}
	if len(s.join) > 0 {
		args = append(args, "--join", strings.Join(s.join, ","))
	}
	args = append(args, s.extra...)
	cmd := exec.Command(bin, args...)
	if f != nil {
		cg, err := f.cgroup(s.name)
		if err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	}
	return launch(t, s.name, cmd)
}
