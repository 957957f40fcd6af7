// Package deploy tests deploy/ as a user runs it, against the Full local control plane:
// "converge install" (dry-run, apply, re-apply), kubectl's own server-side dry-run of the
// base, the daemon authenticated as the base's ServiceAccount with only the base's RBAC plus
// the example apply grant, and "converge uninstall". It only has tests.
package deploy
