package content

// Stored images and the files directory, served by name.

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/safepath"
)

// Image resolves a stored image by sha256, unique prefix or name; kind, when
// not empty, restricts it. ctx bounds the wait for a blob this appliance
// fetches from a peer first.
func (s *Service) Image(ctx context.Context, ref, kind string) (core.Image, *os.File, error) {
	if s.opt.Images == nil {
		return core.Image{}, nil, notFound("no image store")
	}
	im, err := s.opt.Images.Resolve(ref)
	if err != nil {
		if errors.Is(err, core.ErrNotFound) {
			return im, nil, notFound("no image %q", ref)
		}
		return im, nil, &Error{Status: 400, Reason: err.Error()}
	}
	if kind != "" && im.Kind != kind {
		return im, nil, notFound("no %s %q", kind, ref)
	}
	f, err := s.opt.Images.OpenContext(ctx, im)
	if err != nil {
		// The device learns which image; the path is for the log.
		return im, nil, &Error{Status: 503, Reason: fmt.Sprintf("image %s is not available on this server (its content is missing)", im.Name),
			Detail: err.Error()}
	}
	return im, f, nil
}

// RecordImage notes that the device behind c fetched im (known devices only).
func (s *Service) RecordImage(c *Client, im core.Image) {
	var dev core.Device
	var stored bool
	_ = s.opt.Store.View(func(tx core.Tx) error {
		var err error
		dev, stored, err = s.identify(tx, c)
		return err
	})
	if !stored {
		return
	}
	learn(&dev, c)
	s.progress(c, dev, "", core.StateImageServed, "image.served", map[string]string{"image": im.Name, "sha256": im.SHA256})
}

// OpenFile opens a file of the files directory by a client-supplied name.
func (s *Service) OpenFile(name string) (*os.File, error) {
	if s.files == nil {
		return nil, notFound("no file %q", name)
	}
	f, err := safepath.Open(s.files, name)
	if err != nil {
		if errors.Is(err, safepath.ErrUnsafe) {
			return nil, forbidden("%v", err)
		}
		return nil, notFound("no file %q", name)
	}
	return f, nil
}
