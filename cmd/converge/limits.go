package main

import (
	"github.com/spf13/pflag"

	"github.com/converge-dev/converge/sources"
)

// addLimitFlags registers the render size limits on fs.
func addLimitFlags(fs *pflag.FlagSet, l *sources.Limits) {
	fs.IntVar(&l.MaxFiles, "max-files", sources.DefaultMaxFiles, "refuse a source with more files than this (hidden folders excepted)")
	fs.Int64Var(&l.MaxFileSize, "max-file-size", sources.DefaultMaxFileSize, "refuse a source file larger than this many bytes")
	fs.IntVar(&l.MaxObjects, "max-objects", sources.DefaultMaxObjects, "refuse a render with more objects than this")
	fs.Int64Var(&l.MaxTotalSize, "max-total-size", sources.DefaultMaxTotalSize, "refuse a render that reads more bytes than this (files, symlinks each time, a copy per kustomize build)")
	fs.Int64Var(&l.MaxRenderMemory, "render-memory-limit", sources.DefaultMaxRenderMemory, "bytes of memory one kustomize build may take in its render child, and one SOPS decryption in converge-decrypt (a hard limit: a build that needs more fails alone, naming this flag)")
	fs.Int64Var(&l.MaxRenderOutput, "max-render-output", sources.DefaultMaxRenderOutput, "refuse a render that decodes more bytes of manifests than this (kustomize builds' answers, plain YAML and JSON files): its objects are decoded in this process (up to 14 bytes of memory per byte)")
	fs.IntVar(&l.RenderSlots, "render-slots", sources.DefaultRenderSlots, "kustomize builds (render children) run at once; their memory is at most this × --render-memory-limit")
}
