package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// waitHTTP polls url until it answers 200, the process exits, or ctx ends. With cfg set it
// authenticates and trusts the cluster CA.
func waitHTTP(ctx context.Context, p *process, url string, cfg *rest.Config) error {
	client := http.DefaultClient
	if cfg != nil {
		rt, err := rest.TransportFor(cfg)
		if err != nil {
			return err
		}
		client = &http.Client{Transport: rt}
	}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("%s exited:\n%s", p.name, p.logTail(3000))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready at %s: %w (log: %s)", p.name, url, err, p.log.Name())
	}
	return nil
}

// createFakeNode registers the kwok node and waits until it is Ready.
func (c *Cluster) createFakeNode(ctx context.Context) error {
	cs := c.Clientset()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        FakeNodeName,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				"type": "kwok", "kubernetes.io/hostname": FakeNodeName,
				"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", FakeNodeName, err)
	}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, FakeNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (see %s/kwok.log): %w", FakeNodeName, c.Dir, err)
	}
	return nil
}

// Running clusters, stopped on SIGINT/SIGTERM so an interrupted test run leaves nothing behind.
var (
	signalMu   sync.Mutex
	running    = map[*Cluster]struct{}{}
	signalOnce sync.Once
)

func registerForSignals(c *Cluster) {
	signalMu.Lock()
	running[c] = struct{}{}
	signalMu.Unlock()
	signalOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		go func() {
			sig := <-ch
			signalMu.Lock()
			cs := make([]*Cluster, 0, len(running))
			for c := range running {
				cs = append(cs, c)
			}
			signalMu.Unlock()
			for _, c := range cs {
				c.Stop()
			}
			fmt.Fprintf(os.Stderr, "converge cluster: stopped on %s\n", sig)
			os.Exit(130)
		}()
	})
}

func unregisterForSignals(c *Cluster) {
	signalMu.Lock()
	delete(running, c)
	signalMu.Unlock()
}
