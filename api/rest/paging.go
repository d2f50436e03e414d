package rest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

const (
	defaultLimit = 100
	maxLimit     = 1000
	maxBody      = 1 << 20
)

// listParams reads limit and cursor. Cursors are opaque to clients: the
// listing position (a record's cursor in its repository) to resume after.
func listParams(c *gin.Context) (limit int, after string, ok bool) {
	limit = defaultLimit
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			Refuse(c, core.KindInvalid, "limit must be 1.."+strconv.Itoa(maxLimit))
			return 0, "", false
		}
		limit = n
	}
	if v := c.Query("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil {
			Refuse(c, core.KindInvalid, "malformed cursor")
			return 0, "", false
		}
		after = string(b)
	}
	return limit, after, true
}

func cursorOf(pos string) string { return base64.RawURLEncoding.EncodeToString([]byte(pos)) }

// Event cursors carry a sequence number, zero-padded to 20 digits so that
// they are the cursors clients were handed before (and keep the order of
// their text).
func eventPos(seq uint64) string { return fmt.Sprintf("%020d", seq) }

func parseEventPos(pos string) (uint64, bool) {
	if pos == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(pos, 10, 64)
	return n, err == nil
}

// collect reads one page from a repository listing (records in cursor
// order after after): up to limit records that keep accepts (nil: all),
// each mapped to its view. When a record is visited past a full page,
// next_cursor is the position of the last record visited before it.
func collect[T, V any](list func(after string, fn core.Visit[T]) error, after string, limit int,
	pos func(T) string, keep func(T) bool, view func(T) V) (client.Page[V], error) {
	out := client.Page[V]{Items: []V{}}
	var last string
	more := false
	err := list(after, func(v T) (bool, error) {
		if len(out.Items) == limit {
			more = true
			return false, nil
		}
		last = pos(v) // by value: a pointer would move every record to the heap
		if keep == nil || keep(v) {
			out.Items = append(out.Items, view(v))
		}
		return true, nil
	})
	if more {
		out.NextCursor = cursorOf(last)
	}
	return out, err
}

// writeAppended answers with the JSON fill appends to buf (without the
// final newline): the big listings, which write their pages by hand
// (appendPage). When the answer depends on nothing but the aggregates aggs
// and the request (path, query, caller), and the store counts writes, it
// is kept in the response cache and shared until one of aggs changes; pass
// no aggregates for an answer that must not be kept (one filtered by a
// user key's clusters, which depends on more).
func (s *Door) writeAppended(c *gin.Context, fill func(buf []byte) ([]byte, error), aggs ...core.Aggregate) {
	g, ok := s.st.(core.Generations)
	if !ok || len(aggs) == 0 {
		bp := renderBufs.Get().(*[]byte)
		buf, err := fill((*bp)[:0])
		if err != nil {
			s.restFail(c, err)
		} else {
			httpserve.WriteJSONBody(c.Writer, http.StatusOK, append(buf, '\n'))
		}
		putRenderBuf(bp, buf)
		return
	}
	gen := g.Generation(aggs...) // before reading: see core.Generations
	cred := credOf(c)
	key := bodycache.Key(c.Request.Method, c.Request.URL.Path, c.Request.URL.RawQuery, cred.APIKey, string(cred.Role))
	body, err := s.bodies.GetBody(key, gen, func() ([]byte, error) { return renderBody(fill) })
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteCachedJSON(c.Writer, c.Request, http.StatusOK, body.Raw, body.Gzipped)
}

// encodeJSON is v's JSON (with a final newline, as httpserve.WriteJSON
// writes it), exactly sized: for the response cache.
func encodeJSON(v any) ([]byte, error) {
	return renderBody(func(buf []byte) ([]byte, error) { return appendEncoded(buf, v) })
}

// renderBody is what fill appends, with a final newline, exactly sized.
func renderBody(fill func(buf []byte) ([]byte, error)) ([]byte, error) {
	bp := renderBufs.Get().(*[]byte)
	buf, err := fill((*bp)[:0])
	var out []byte
	if err == nil {
		out = append(make([]byte, 0, len(buf)+1), buf...)
		out = append(out, '\n')
	}
	putRenderBuf(bp, buf)
	return out, err
}

// appendEncoded appends v's JSON by encoding/json (as json.Marshal writes
// it: HTML-safe).
func appendEncoded(buf []byte, v any) ([]byte, error) {
	bb := bytes.NewBuffer(buf)
	if err := json.NewEncoder(bb).Encode(v); err != nil {
		return buf, err
	}
	b := bb.Bytes()
	return b[:len(b)-1], nil // the encoder's newline: the writers add theirs
}

// renderBufs recycles the buffers of answers that are not cached: a page
// is tens of kilobytes, and allocating one per request is most of what the
// collector would have to do. WriteJSONBody is done with it when it returns.
var renderBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

const maxPooledRender = 1 << 20

// putRenderBuf returns buf (grown from *bp) to the pool unless it grew too
// big to keep.
func putRenderBuf(bp *[]byte, buf []byte) {
	if cap(buf) <= maxPooledRender {
		*bp = buf[:0]
		renderBufs.Put(bp)
	}
}
