//go:build !cgo

package childproc

// cgoThreadMargin is zero without cgo: Go threads take their stacks from the Go heap.
const cgoThreadMargin = 0
