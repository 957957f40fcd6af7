// Package sops decrypts SOPS-encrypted objects of a rendered Bundle in memory, as Flux's
// kustomize-controller does per resource: an object with a top-level "sops" field carrying a
// MAC (any kind, as Flux), and a Secret data entry that is itself a SOPS-encrypted file (what
// a kustomize secretGenerator makes of an encrypted file). Only age keys are supported.
//
// It runs in the parent after the isolated render, on the rendered objects, so the plaintext
// never touches disk. The decryption itself runs in a separate program, converge-decrypt
// (package decrypter), the only binary that links sops: sops' packages link every cloud KMS
// client and gRPC, tens of MB of code that would be resident in the daemon and in each of
// its render children. Decrypt starts that program only when an object is encrypted, and
// hands it the encrypted objects and the keys on its stdin. What the daemon needs without
// decrypting (recognising and masking encrypted objects, reading keys) is here and links
// no sops package.
//
// It never modifies the Bundle it is given (its Objects may be shared with a kept result):
// it returns a new Bundle holding the decrypted objects. Its errors name the object and its
// origin but never carry a value.
//
// It must not import a Kubernetes client: the caller reads the keys (the daemon as the Sync's
// identity, the CLI from files) and hands them over as bytes.
package sops
