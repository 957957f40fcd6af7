// Package netguard refuses connections to the daemon's own machine and link: the check on
// a resolved address and the net.Dialer that applies it, shared by every source fetcher
// (sources/git, sources/oci).
//
// A source URL is tenant input. The check runs where a connection is dialed, after name
// resolution, so a name that resolves (or re-resolves, DNS rebinding) to a refused address
// and an HTTP redirect to one are refused alike.
//
// It must not import the rest of Converge.
package netguard
