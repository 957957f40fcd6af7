package oci

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"oras.land/oras-go/v2/registry/remote/auth"
)

// dockerConfig is the part of a .dockerconfigjson that names credentials.
type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
}

// credential returns the credential of host in a .dockerconfigjson (empty data:
// anonymous). An entry matches by host: "host", "https://host", "https://host/v1/" alike,
// and Docker Hub's names as one.
func credential(url, host string, data []byte) (auth.Credential, error) {
	if len(data) == 0 {
		return auth.EmptyCredential, nil
	}
	var c dockerConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return auth.EmptyCredential, fmt.Errorf("%s: %w: .dockerconfigjson: %v", url, ErrInvalid, err)
	}
	for key, e := range c.Auths {
		if normalHost(key) != normalHost(host) {
			continue
		}
		cred := auth.Credential{Username: e.Username, Password: e.Password, RefreshToken: e.IdentityToken, AccessToken: e.RegistryToken}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			user, pass, ok := strings.Cut(string(raw), ":")
			if err != nil || !ok {
				return auth.EmptyCredential, fmt.Errorf("%s: %w: .dockerconfigjson: auths[%q].auth: want base64 of user:password", url, ErrInvalid, key)
			}
			cred.Username, cred.Password = user, pass
		}
		return cred, nil
	}
	return auth.EmptyCredential, fmt.Errorf("%s: %w: the .dockerconfigjson has no entry for %s", url, ErrAuth, host)
}

// normalHost reduces a .dockerconfigjson key or a registry host to its host[:port].
func normalHost(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	switch s {
	case "index.docker.io", "registry-1.docker.io":
		return "docker.io"
	}
	return s
}

// tlsConfig trusts the system roots and, if given, the PEM bundle ca.
func tlsConfig(url string, ca []byte) (*tls.Config, error) {
	if len(ca) == 0 {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: %w: ca.crt holds no PEM certificate", url, ErrInvalid)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
