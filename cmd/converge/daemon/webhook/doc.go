// Package webhook is the daemon's push webhook receiver: POST /hooks/<namespace>/<name>,
// signed by the Sync's own Secret (a GitHub HMAC or a GitLab token) read as the Sync's
// identity, sets the Sync's requestedAt annotation. What one caller may cost is bounded
// (Options): body size, requests and connections at once, slow clients, Secret reads, and
// the memory of handled deliveries that makes a replay trigger nothing.
package webhook
