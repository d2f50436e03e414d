package agentdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// FuzzAgentReport: whatever a device posts as a step report, the agent
// endpoint answers with ztpd's error body or ok, never a 500, and a step's
// stored output stays bounded valid UTF-8.
func FuzzAgentReport(f *testing.F) {
	fx := storetest.Open(f)
	const dev = "02:00:00:00:00:42"
	storetest.Update(f, fx.Store, func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: dev, MAC: dev, Kind: core.KindVM, State: core.StateJoined})
	})
	des := desired.New(fx.Store, desired.Options{Auth: apitest.CredentialIsDevice{}, Log: slog.New(slog.DiscardHandler)})
	op := core.AgentOperation{ID: "op-f", Kind: core.OpLeave, Steps: []core.AgentStep{{Name: "leave", Action: "kube-reset"}}}
	if err := des.Assign(context.Background(), "fuzz", dev, op, nil); err != nil {
		f.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	srv := gin.New()
	New(des, slog.New(slog.DiscardHandler)).Route(srv)
	for _, seed := range []string{
		`{"operation":"op-f","step":"leave","state":"running","exit_code":0,"output":"x","boot_id":"b","agent_version":"1"}`,
		`{"operation":"op-f","step":"leave","state":"failed","exit_code":-9,"output":"\u0000\ufffd"}`,
		`{"operation":"op-f","step":"leave","state":"succeeded","exit_code":1e400}`,
		`{"operation":"op-f","step":"../leave","state":"running"}`, `[]`, `{`, ``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, Path+"report", strings.NewReader(body))
		req.RemoteAddr = "10.99.0.42:4000"
		req.Header.Set("Authorization", "Bearer "+dev)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict:
		default:
			t.Fatalf("report %q: %d %s", body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" {
				t.Fatalf("report %q: error body %s", body, rec.Body)
			}
		}
		got, err := des.Operation(dev)
		if err != nil || got == nil {
			t.Fatalf("operation: %v", err)
		}
		for _, st := range got.Steps {
			if len(st.Output) > desired.MaxOutput || !bytes.Equal([]byte(strings.ToValidUTF8(st.Output, "")), []byte(st.Output)) {
				t.Fatalf("stored output of %d bytes, valid UTF-8 %v", len(st.Output), strings.ToValidUTF8(st.Output, "") == st.Output)
			}
		}
	})
}
