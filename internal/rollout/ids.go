package rollout

import "crypto/rand"

// randomName returns n characters of [a-z0-9] from crypto/rand, without
// modulo bias: the unique part of rollout and operation IDs.
func randomName(n int) (string, error) {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/4+8)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b < 252 { // 252 = 7*36: keeps the distribution uniform
				out = append(out, alphabet[b%36])
				if len(out) == n {
					break
				}
			}
		}
	}
	return string(out), nil
}
