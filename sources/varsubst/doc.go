// Package varsubst runs Flux's post-build variable substitution on a rendered Bundle:
// ${var}, ${var:=default} and ${var:-default} (and the rest of the shell forms Flux's
// envsubst knows) are replaced in the YAML text of every object, which is then decoded
// again, so `replicas: ${REPLICAS}` becomes a number as it does under Flux. $$ escapes a
// dollar ($${var} is left as the text ${var}).
//
// It owns the rules a Flux user relies on: variable names, the merge order of variable
// sources (later wins), newlines stripped from values, the opt-out label or annotation
// (kustomize.toolkit.fluxcd.io/substitute: disabled or converge.dev/substitute: disabled),
// no substitution at all when no variable is defined (Flux's default substituteStrategy),
// and strict mode. It also owns the Redactor that hides Secret-sourced values in messages.
//
// Objects in, objects out: it never reads a ConfigMap or Secret itself (callers read them
// with the identity that may read them and pass plain Sources), it never modifies the
// Bundle it is given (its objects may be shared with a kept result) and it must not import
// kube clients, engine, inventory or status.
package varsubst
