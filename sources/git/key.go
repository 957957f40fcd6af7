package git

// cacheKey names the cache of one (URL, credentials) pair. Repositories and checkouts are
// never shared between credentials: what one Sync's secret fetched, a Sync with no secret
// or another one cannot read, not even by naming a commit that is already cached. Two Syncs
// with the same URL and credentials share one cache. The name is an HMAC (sources/cachekey).
func (f *Fetcher) cacheKey(repo Repository) (string, error) {
	a := repo.Auth
	return f.keyer.Name([]byte(repo.URL), []byte(a.Username), []byte(a.Password), []byte(a.BearerToken),
		a.SSHPrivateKey, a.SSHKnownHosts)
}
