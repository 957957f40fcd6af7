//go:build cgo

package childproc

// cgoThreadMargin is address space for the 8 MiB stack reservations of about 24 threads.
const cgoThreadMargin = 192 << 20
