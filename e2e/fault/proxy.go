package fault

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Proxy is a TLS reverse proxy in front of kube-apiserver for black-box tests of a binary:
// every request goes through Transport, so its rules, counts and writes apply to whatever
// talks to the proxy. Clients connect without credentials (the proxy authenticates to the
// API server as the target config's user); responses, watch streams included, are flushed
// as they arrive. A request failed by a fault (blackhole, dropped response, broken stream)
// resets the client's stream, as a lost connection does.
type Proxy struct {
	// Transport injects the faults and counts the requests; set its rules with SetRules.
	*Transport
	// URL is the proxy's base URL, https://127.0.0.1:port.
	URL string

	srv *httptest.Server
	ca  []byte
}

// NewProxy starts a proxy to the API server of target. Close it when done.
func NewProxy(target *rest.Config) (*Proxy, error) {
	upstream, err := rest.TransportFor(target)
	if err != nil {
		return nil, fmt.Errorf("fault proxy: transport: %w", err)
	}
	host, _, err := rest.DefaultServerUrlFor(target)
	if err != nil {
		return nil, fmt.Errorf("fault proxy: target: %w", err)
	}
	base := &url.URL{Scheme: host.Scheme, Host: host.Host}
	t := &Transport{}
	t.Wrap(upstream)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Header.Del("Authorization") // only the proxy's identity reaches the server
		},
		Transport:     t,
		FlushInterval: -1,
		ErrorLog:      log.New(quietLog{os.Stderr}, "fault proxy: ", log.LstdFlags),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, ErrInjected) {
				panic(http.ErrAbortHandler) // reset the stream: the client sees a lost connection
			}
			http.Error(w, "fault proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	srv := httptest.NewUnstartedServer(rp)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	p := &Proxy{Transport: t, URL: srv.URL, srv: srv,
		ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	return p, nil
}

// quiet drops the proxy's log lines about faults it injected itself.
type quietLog struct{ w io.Writer }

func (q quietLog) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("fault: ")) {
		return len(p), nil
	}
	return q.w.Write(p)
}

// Config returns a REST config that talks to the API server through the proxy.
func (p *Proxy) Config() *rest.Config {
	return &rest.Config{Host: p.URL, TLSClientConfig: rest.TLSClientConfig{CAData: p.ca}, QPS: -1}
}

// WriteKubeconfig writes a kubeconfig at path that talks to the API server through the proxy.
func (p *Proxy) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fault-proxy"] = &clientcmdapi.Cluster{Server: p.URL, CertificateAuthorityData: p.ca}
	cfg.AuthInfos["fault-proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["fault-proxy"] = &clientcmdapi.Context{Cluster: "fault-proxy", AuthInfo: "fault-proxy", Namespace: "default"}
	cfg.CurrentContext = "fault-proxy"
	return clientcmd.WriteToFile(*cfg, path)
}

// Close drops every client connection, open watches included, and stops the proxy.
func (p *Proxy) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}
