package content

import (
	"context"

	"github.com/ztpd/ztpd/images/binaries"
)

// Binaries reads a Kubernetes version's binaries from its ISO in the image
// store; images/binaries.Service implements it.
type Binaries interface {
	Sums(ctx context.Context, tag string) (binaries.Set, error)
	Open(ctx context.Context, tag, name string) (*binaries.File, error)
}

// Binary opens the binary name (kubeadm, kubelet, kubectl) of the
// Kubernetes version tag. They are the same for every device, which
// fetches them by URL from its agent's step, so no identity is asked.
func (s *Service) Binary(ctx context.Context, tag, name string) (*binaries.File, error) {
	if s.opt.Binaries == nil {
		return nil, notFound("no Kubernetes binaries are served here")
	}
	return s.opt.Binaries.Open(ctx, tag, name)
}

// BinarySums is the Kubernetes version tag's binaries with their sha256s.
func (s *Service) BinarySums(ctx context.Context, tag string) (binaries.Set, error) {
	if s.opt.Binaries == nil {
		return binaries.Set{}, notFound("no Kubernetes binaries are served here")
	}
	return s.opt.Binaries.Sums(ctx, tag)
}
