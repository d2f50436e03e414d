package backup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
)

// FuzzBackupArchive feeds arbitrary bytes to every reader of the format:
// the header parser, the chunk decrypter (with a fixed key, so input gets
// past authentication only when it is a real chunk stream) and the
// manifest and member reader on plaintext. None may panic, loop, or hand
// out a member whose content differs from its manifest entry: a member
// read to its end without error matches its size and sha256.
func FuzzBackupArchive(f *testing.F) {
	src := backupNewSource(f)
	arch := src.archive(f, true, true)
	plain, err := Decrypt(bytes.NewReader(arch), testPass)
	if err != nil {
		f.Fatal(err)
	}
	payload, _ := io.ReadAll(plain)
	f.Add(arch)
	f.Add(payload)
	f.Add(payload[:len(payload)/2])
	f.Add(arch[headerSize:])
	f.Add([]byte(magic))
	f.Add([]byte{})

	// A fixed payload key for the chunk reader: fuzzing scrypt per input
	// would find nothing and take forever.
	key := sha256.Sum256([]byte("fuzz"))
	aead, err := newGCM(key[:])
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if h, err := ParseHeader(bytes.NewReader(data)); err == nil {
			if h.KDF.check() != nil || h.ChunkLog < minChunkLog || h.ChunkLog > maxChunkLog {
				t.Fatalf("header accepted with parameters out of range: %+v", h)
			}
		}
		fuzzReadPayload(t, bytes.NewReader(data))
		fuzzReadPayload(t, newDecReader(bytes.NewReader(data), aead, defaultChunk))
	})
}

// fuzzReadPayload reads a payload as a restore does; whatever it accepts
// must be what its manifest says.
func fuzzReadPayload(t *testing.T, r io.Reader) {
	ar, err := NewReader(r)
	if err != nil {
		return
	}
	if err := ar.Manifest.Validate(); err != nil {
		t.Fatalf("NewReader accepted a manifest Validate refuses: %v", err)
	}
	for i := 0; ; i++ {
		mb, mr, err := ar.Next()
		if errors.Is(err, io.EOF) {
			if i != len(ar.Manifest.Members) {
				t.Fatalf("end after %d of %d members", i, len(ar.Manifest.Members))
			}
			return
		}
		if err != nil {
			return
		}
		h := sha256.New()
		n, err := io.Copy(h, mr)
		if err != nil {
			return
		}
		if n != mb.Size || hexSum(h.Sum(nil)) != mb.SHA256 {
			t.Fatalf("member %s read whole: %d bytes sha256 %x, manifest %d %s", mb.Path, n, h.Sum(nil), mb.Size, mb.SHA256)
		}
	}
}

func hexSum(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
