package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

var env *Cluster

func TestMain(m *testing.M) {
	if os.Getenv("CONVERGE_CLUSTER_HELPER") != "" {
		helperProcess()
		return
	}
	Main(m, Full, &env)
}

// TestSmokeDeploymentBecomesAvailable proves the Full profile: a Deployment created with
// client-go gets a Pod scheduled on the kwok node and becomes Available.
func TestSmokeDeploymentBecomesAvailable(t *testing.T) {
	Require(t, env)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := env.Clientset()
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
				return d.Status.AvailableReplicas == 2, nil
			}
		}
		return false, nil
	})
	if err != nil {
		d, _ := cs.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
		t.Fatalf("deployment never became Available: %v; status: %+v", err, d.Status)
	}
}

// TestKubeconfigWorks checks the written kubeconfig reaches the server as the admin user and
// the server reports the built version.
func TestKubeconfigWorks(t *testing.T) {
	Require(t, env)
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	info, err := env.Clientset().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.GitVersion, "v1.36.") {
		t.Errorf("server version = %q, want v1.36.x", info.GitVersion)
	}
	if cfg.Host != env.Config.Host {
		t.Errorf("kubeconfig host = %q, want %q", cfg.Host, env.Config.Host)
	}
}

// TestStopLeavesNoProcess starts an API control plane, stops it and checks that no process
// it started is left.
func TestStopLeavesNoProcess(t *testing.T) {
	Require(t, env)
	c, err := Start(context.Background(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	pids := c.pids()
	c.Stop()
	assertGone(t, pids)
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary dir %s left behind: %v", c.Dir, err)
	}
}

// TestInterruptedRunLeavesNoProcess runs a process that starts a control plane, then
// interrupts (SIGINT) or kills (SIGKILL) it, and checks no etcd or kube-apiserver survives.
func TestInterruptedRunLeavesNoProcess(t *testing.T) {
	Require(t, env)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "CONVERGE_CLUSTER_HELPER=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				_ = cmd.Process.Kill()
				t.Fatalf("helper did not report its pids: %v", err)
			}
			var pids []int
			for _, f := range strings.Fields(line) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("helper output %q: %v", line, err)
				}
				pids = append(pids, pid)
			}
			if len(pids) != 2 {
				t.Fatalf("helper reported %d pids, want 2 (etcd, kube-apiserver)", len(pids))
			}
			_ = cmd.Process.Signal(sig)
			_ = cmd.Wait()
			assertGone(t, pids)
		})
	}
}

// helperProcess starts an API control plane, prints its pids and waits to be interrupted.
func helperProcess() {
	c, err := Start(context.Background(), DefaultOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var s []string
	for _, pid := range c.pids() {
		s = append(s, strconv.Itoa(pid))
	}
	fmt.Println(strings.Join(s, " "))
	time.Sleep(2 * time.Minute)
	c.Stop()
	os.Exit(3)
}

func (c *Cluster) pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pids []int
	for _, p := range c.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

// assertGone fails t unless every pid has exited (zombies of an exited parent are reaped by
// init quickly; poll briefly).
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true,
			func(context.Context) (bool, error) { return !alive(pid), nil })
		if err != nil {
			t.Errorf("process %d still running after stop", pid)
		}
	}
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data))
	return len(fields) > 2 && fields[2] != "Z"
}

// TestFakeNodeStaysReady checks that the fake node and a Pod on it stay Ready for longer than
// the node monitor grace period the cluster was started with: the node's heartbeat (kwok's
// renewal of its Lease) must reach the node lifecycle controller in time, or the controller
// marks the node NotReady, taints it and marks its Pods Ready=False, which kwok never undoes.
func TestFakeNodeStaysReady(t *testing.T) {
	Require(t, env)
	grace := env.NodeMonitorGracePeriod
	if grace == 0 {
		t.Fatal("the cluster does not report its node monitor grace period")
	}
	ns := env.Namespace(t)
	cs := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), grace+2*time.Minute)
	defer cancel()
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "steady", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// podName is the Deployment's Pod once it is Ready.
	var podName string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=steady"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if podReady(&p) {
				podName = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the Deployment's Pod never became Ready: %v", err)
	}

	// Outlast the grace period by a few monitor periods: without a heartbeat the controller
	// notices within one period after the grace period ends.
	until := time.Now().Add(grace + 3*NodeMonitorPeriod)
	for time.Now().Before(until) {
		node, err := cs.CoreV1().Nodes().Get(ctx, FakeNodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var problems []string
		if !nodeReady(node) {
			problems = append(problems, "node not Ready")
		}
		for _, taint := range node.Spec.Taints {
			problems = append(problems, fmt.Sprintf("node tainted %s:%s", taint.Key, taint.Effect))
		}
		if !podReady(pod) {
			problems = append(problems, fmt.Sprintf("pod %s not Ready", podName))
		}
		if len(problems) > 0 {
			lease := "none"
			if l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, FakeNodeName, metav1.GetOptions{}); err == nil && l.Spec.RenewTime != nil {
				lease = "renewed " + time.Since(l.Spec.RenewTime.Time).Round(time.Second).String() + " ago"
			}
			t.Fatalf("%s (grace period %s; node lease: %s)", strings.Join(problems, "; "), grace, lease)
		}
		time.Sleep(time.Second)
	}
}

// deployment is an nginx Deployment of replicas Pods labelled app=name.
func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "nginx:1.27"}}},
			},
		},
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
