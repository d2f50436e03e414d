package auth

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/apikeys"
)

// FailedText is CloudStack's exact text for every authentication failure;
// the REST API and the console answer it too.
const FailedText = "unable to verify user credentials and/or request signature"

// Failures records failed authentications the same way for every door:
// counted, logged without secrets, and charged to the client address's
// limit.
type Failures struct {
	limiter *FailLimiter
	keys    *apikeys.Service
	log     *slog.Logger
	count   *prometheus.CounterVec // by api and outcome
	now     func() time.Time
}

// NewFailures records failures in limiter and count (labels api and
// outcome) and logs them to log, naming keys known to keys in full.
func NewFailures(limiter *FailLimiter, keys *apikeys.Service, log *slog.Logger, count *prometheus.CounterVec, now func() time.Time) *Failures {
	return &Failures{limiter: limiter, keys: keys, log: log, count: count, now: now}
}

// Record counts, logs and rate-limits one failed authentication of api
// (cloudstack, rest, console) from ip; what is the operation attempted.
func (f *Failures) Record(api, ip, apiKey, what string, err error) {
	if _, ok := err.(*Error); !ok {
		f.log.Error("API authentication error", "api", api, "client", ip, "err", err)
	}
	f.limiter.Failed(ip, f.now())
	f.count.WithLabelValues(api, "failed").Inc()
	f.log.Warn("API authentication failed", "api", api, "client", ip, "api_key", loggedKey(f.keys, apiKey), "op", what, "reason", err.Error())
}

// loggedKey is how a failed authentication's API key is logged: a known
// key as it is, anything else cut to its first 6 characters. Keys and
// secrets look alike (43 characters), and an operator who swaps the
// console's two fields, or a client that sends its secret as its key,
// must not leave the secret in the log.
func loggedKey(keys *apikeys.Service, apiKey string) string {
	if apiKey == "" {
		return ""
	}
	if keys != nil {
		if _, err := keys.Lookup(apiKey); err == nil {
			return apiKey
		}
	}
	if len(apiKey) > 6 {
		return apiKey[:6] + "... (unknown)"
	}
	return apiKey + " (unknown)"
}
