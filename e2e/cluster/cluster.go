package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Profile selects which components a control plane runs.
type Profile string

const (
	// API runs etcd and kube-apiserver only; it starts in seconds. Nothing reconciles
	// workloads: Deployments never get Pods.
	API Profile = "api"
	// Full adds kube-controller-manager, kube-scheduler and kwok with one fake node, so a
	// Deployment really becomes Available.
	Full Profile = "full"
)

// FakeNodeName is the name of the kwok node of the Full profile.
const FakeNodeName = "kwok-node-0"

// Options configures Start.
type Options struct {
	// Profile is API or Full.
	Profile Profile
	// Dir holds data, certificates, logs and the kubeconfig. Empty means a new temporary
	// directory, removed by Stop.
	Dir string
	// BinDir holds the binaries built by e2e/tools/build.sh. Empty means
	// $CONVERGE_CONTROLPLANE_BIN, else the directory build.sh reports for this checkout.
	BinDir string
	// StartTimeout bounds the start of every component.
	StartTimeout time.Duration
	// NodeMonitorGracePeriod (Full profile) is how long kube-controller-manager waits for a
	// heartbeat of the fake node before it marks the node NotReady, taints it and marks its
	// Pods NotReady (kwok never makes a Running Pod Ready again). kwok renews the node's
	// Lease every eighth of it. Zero means DefaultNodeMonitorGracePeriod.
	NodeMonitorGracePeriod time.Duration
}

// DefaultNodeMonitorGracePeriod is the grace period of kwokctl's clusters (Kubernetes' own
// default is 50s); kwok renews the node Lease every 5s with it.
const DefaultNodeMonitorGracePeriod = 40 * time.Second

// NodeMonitorPeriod is how often kube-controller-manager checks node heartbeats (its default).
const NodeMonitorPeriod = 5 * time.Second

// DefaultOptions returns the API profile in a temporary directory.
func DefaultOptions() Options {
	return Options{Profile: API, StartTimeout: 2 * time.Minute, NodeMonitorGracePeriod: DefaultNodeMonitorGracePeriod}
}

// Cluster is a running local control plane.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig for the admin token user.
	Kubeconfig string
	// Config is the REST config of the admin token user.
	Config *rest.Config
	// Dir is the working directory of the control plane.
	Dir string
	// NodeMonitorGracePeriod is the grace period kube-controller-manager was started with
	// (Full profile), for tests that must outlast it.
	NodeMonitorGracePeriod time.Duration

	removeDir bool
	mu        sync.Mutex
	procs     []*process
}

// Start starts a control plane with opts. On error it stops whatever it started.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultOptions().StartTimeout
	}
	if opts.NodeMonitorGracePeriod == 0 {
		opts.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	if opts.NodeMonitorGracePeriod < 8*time.Second {
		return nil, fmt.Errorf("node monitor grace period %s: want at least 8s (kwok renews the node lease every eighth of it)", opts.NodeMonitorGracePeriod)
	}
	binDir, err := resolveBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: opts.Dir, NodeMonitorGracePeriod: opts.NodeMonitorGracePeriod}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "converge-cluster-"); err != nil {
			return nil, err
		}
		c.removeDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	started := c // the error returns below set c to nil: stop what this call started
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	registerForSignals(c)

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	p, err := writePKI(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	etcdURL, err := c.startEtcd(ctx, binDir)
	if err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, binDir, p, token, etcdURL); err != nil {
		return nil, err
	}
	if opts.Profile == Full {
		if err := c.startWorkloadComponents(ctx, binDir, p, opts.NodeMonitorGracePeriod); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Stop stops every component in reverse start order and removes a temporary directory.
// It is safe to call more than once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(10 * time.Second)
	}
	unregisterForSignals(c)
	if c.removeDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// Clientset returns a typed client for the admin user.
func (c *Cluster) Clientset() *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(c.Config)
}

func (c *Cluster) add(p *process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = append(c.procs, p)
}

func (c *Cluster) start(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(c.Dir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.add(p)
	return p, nil
}

func (c *Cluster) startEtcd(ctx context.Context, binDir string) (string, error) {
	clientPort, peerPort := freePort(), freePort()
	if clientPort == 0 || peerPort == 0 {
		return "", errors.New("etcd: no free loopback port")
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := c.start("etcd", filepath.Join(binDir, "etcd"),
		"--name=default",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync=true", "--quota-backend-bytes=8589934592",
		"--log-level=warn")
	if err != nil {
		return "", err
	}
	err = waitHTTP(ctx, p, clientURL+"/health", nil)
	return clientURL, err
}

func (c *Cluster) startAPIServer(ctx context.Context, binDir string, p *pki, token, etcdURL string) error {
	tokens := filepath.Join(c.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	port := freePort()
	if port == 0 {
		return errors.New("kube-apiserver: no free loopback port")
	}
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	proc, err := c.start("kube-apiserver", filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"),
		"--tls-cert-file="+p.serverCert, "--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caCert,
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.saPub,
		"--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--profiling=false",
		"--enable-priority-and-fairness=true")
	if err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host:            host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM},
		QPS:             -1, // a local test server: no client-side throttling
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, host, p.caPEM, token); err != nil {
		return err
	}
	return waitHTTP(ctx, proc, host+"/readyz", c.Config)
}

// startWorkloadComponents starts kube-controller-manager, kube-scheduler and kwok, and
// registers the fake node.
//
// The fake node stays Ready the way a real kubelet's does: kwok renews its Lease in
// kube-node-lease (--node-lease-duration-seconds; without it kwok keeps no lease, and its
// heartbeat-with-lease stage patches the node status only every 10 to 20 minutes), and the
// node lifecycle controller counts a renewed lease as a heartbeat. Without the lease the
// node went NotReady every grace period: kwok set it Ready again at once, but its Pods stayed
// Ready=False for good. The lease lasts half the grace period and kwok renews it every
// quarter of its duration (every 5s by default), so eight renewals fit in a grace period:
// room for a loaded machine.
func (c *Cluster) startWorkloadComponents(ctx context.Context, binDir string, p *pki, grace time.Duration) error {
	kc := "--kubeconfig=" + c.Kubeconfig
	if _, err := c.start("kube-controller-manager", filepath.Join(binDir, "kube-controller-manager"), kc,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--service-account-private-key-file="+p.saKey, "--root-ca-file="+p.caCert,
		"--use-service-account-credentials=false",
		"--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-persistentvolume-binder,-attachdetach,-ttl",
		"--node-monitor-grace-period="+grace.String(), "--node-monitor-period="+NodeMonitorPeriod.String(),
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		"--kube-api-qps=200", "--kube-api-burst=400"); err != nil {
		return err
	}
	if _, err := c.start("kube-scheduler", filepath.Join(binDir, "kube-scheduler"), kc,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--kube-api-qps=200", "--kube-api-burst=400"); err != nil {
		return err
	}
	if _, err := c.start("kwok", filepath.Join(binDir, "kwok"), kc,
		"--config="+filepath.Join(binDir, "..", "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds="+strconv.Itoa(int(grace/2/time.Second)),
		"--cidr=10.0.1.0/24", "--node-ip=10.0.0.2",
		"--server-address=127.0.0.1:"+strconv.Itoa(freePort())); err != nil {
		return err
	}
	return c.createFakeNode(ctx)
}

// resolveBinDir finds the control-plane binaries.
func resolveBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("CONVERGE_CONTROLPLANE_BIN")
	}
	if dir == "" {
		script, err := findBuildScript()
		if err != nil {
			return "", err
		}
		out, err := exec.Command("bash", script, "--dir").Output()
		if err != nil {
			return "", fmt.Errorf("%s --dir: %w", script, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("control plane binaries not found in %s: run `make controlplane` first (%w)", dir, err)
	}
	return dir, nil
}

// findBuildScript walks up from the working directory to the checkout's e2e/tools/build.sh.
func findBuildScript() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		script := filepath.Join(d, "e2e", "tools", "build.sh")
		if _, err := os.Stat(script); err == nil {
			return script, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("cannot find e2e/tools/build.sh above the working directory; set CONVERGE_CONTROLPLANE_BIN")
		}
	}
}

func writeKubeconfig(path, host string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["converge-local"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["converge-local"] = &clientcmdapi.Context{Cluster: "converge-local", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "converge-local"
	return clientcmd.WriteToFile(*cfg, path)
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// FreeAddr returns a loopback address ("127.0.0.1:port") that was free a moment ago, for
// servers that tests and the demo start next to the control plane.
func FreeAddr() string {
	return "127.0.0.1:" + strconv.Itoa(freePort())
}

// freePort returns a loopback TCP port that was free a moment ago, or 0. It picks one below
// the kernel's ephemeral range when it can: a port from that range (what listening on port 0
// gives) may be taken by an outgoing connection's local end before the server that was to
// use it binds (seen once in the two-replica sweep: "bind: address already in use").
func freePort() int {
	if low := ephemeralLow(); low > portsFrom+100 {
		for range 50 {
			port := portsFrom + mrand.IntN(low-portsFrom)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				l.Close()
				return port
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// portsFrom is the lowest port freePort picks.
const portsFrom = 20000

// ephemeralLow is the low end of the kernel's ephemeral port range (Linux), 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}
