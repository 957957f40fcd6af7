// Command converge-decrypt decrypts SOPS-encrypted objects for converge: converge starts it,
// only when a render holds an encrypted object, with the objects and the age identities on
// its stdin, and reads the decrypted objects on its stdout. It is the only binary of
// Converge that links sops, whose packages link every cloud KMS client and gRPC; it ships
// beside converge (make build, the image).
package main

import "github.com/converge-dev/converge/sources/sops/decrypter"

func main() { decrypter.Main() }
