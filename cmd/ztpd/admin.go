package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ztpd/ztpd/internal/app"
)

// adminSession is a connection to the admin routes of a data directory: the
// running server's socket, or the store opened in-process when none runs.
type adminSession struct {
	client *http.Client
	close  func() error
}

func openAdmin(opts *rootOptions) (*adminSession, error) {
	cfg, err := loadConfig(opts)
	if err != nil {
		return nil, err
	}
	c, closeFn, err := app.AdminClient(cfg, newLogger(cfg))
	if err != nil {
		return nil, err
	}
	return &adminSession{client: c, close: closeFn}, nil
}

// adminDo checks -o, sends one request over a fresh admin session and
// decodes the JSON answer into out (when not nil).
func adminDo(opts *rootOptions, method, path string, body io.Reader, out any) error {
	if err := checkOutputFormat(opts); err != nil {
		return err
	}
	s, err := openAdmin(opts)
	if err != nil {
		return err
	}
	defer s.close()
	return s.do(method, path, body, out)
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (s *adminSession) do(method, path string, body io.Reader, out any) error {
	req, err := http.NewRequest(method, "http://ztpd"+path, body)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return app.AdminError(resp, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// serverRunning reports whether a ztpd serves the data directory: its admin
// socket answers (a socket file left by a server that died does not).
func serverRunning(dataDir string) bool {
	c, err := net.DialTimeout("unix", filepath.Join(dataDir, app.AdminSocketName), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
