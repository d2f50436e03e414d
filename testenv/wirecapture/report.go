package wirecapture

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// Finding is one secret seen in clear on the wire. It never holds the
// secret: a test log is also a place secrets must not go.
type Finding struct {
	Kind  Kind
	Known string // the label of the known secret it is, if any
	Flow  Flow   // the direction that carried it
	// Where is its place in the flow: "HTTP response to POST /join body
	// (gzip+base64)", "TCP stream", "TFTP file ztp.json", "UDP datagram".
	Where   string
	Digest  string // names the secret: a SHA-256 prefix of its canonical form
	Excerpt string // the text around it, the secret replaced by kind and digest
	// Secret is the secret itself as found, for a test that judges what a
	// listener could do with it (replays it); String never shows it.
	Secret string
}

func (f Finding) String() string {
	known := ""
	if f.Known != "" {
		known = " (" + f.Known + ")"
	}
	return fmt.Sprintf("%s%s %s in %s: %q", f.Kind, known, f.Flow, f.Where, f.Excerpt)
}

// Report is what a capture held.
type Report struct {
	Packets, Conns, UDPFlows int
	Bytes, Missing           int64 // TCP payload reassembled, and lost to holes
	Findings                 []Finding
}

// ScanFile reads a pcap file and scans it (Scan).
func ScanFile(path string, sc *Scanner) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{}, err
	}
	defer f.Close()
	t, err := Read(f)
	if err != nil {
		return Report{}, fmt.Errorf("%s: %w", path, err)
	}
	return Scan(t, sc), nil
}

// Scan finds the secrets in a capture's traffic: each TCP connection's
// HTTP messages (bodies decoded), then both its raw streams, each UDP
// datagram and each TFTP transfer reassembled. A secret is reported once
// per direction of a connection or UDP flow, at its most specific place
// (the HTTP message before the raw stream).
func Scan(t *Traffic, sc *Scanner) Report {
	r := Report{Packets: t.Packets, Conns: len(t.Conns), UDPFlows: len(t.UDP)}
	type key struct {
		flow   Flow
		kind   Kind
		digest string
	}
	seen := map[key]bool{}
	scan := func(flow Flow, v view) {
		for _, m := range sc.Scan(v.data) {
			k := key{flow, m.Kind, m.Digest}
			if seen[k] {
				continue
			}
			seen[k] = true
			r.Findings = append(r.Findings, Finding{Kind: m.Kind, Known: m.Known, Flow: flow, Where: v.where,
				Digest: m.Digest, Excerpt: excerpt(v.data, m), Secret: string(v.data[m.Start:m.End])})
		}
	}
	for _, c := range t.Conns {
		r.Bytes += int64(c.Client.Len() + c.Server.Len())
		r.Missing += c.Client.Missing + c.Server.Missing
		httpViews(c, sc.Redact, scan)
		for _, s := range []*Stream{c.Client, c.Server} {
			for _, p := range s.Pieces {
				expand("TCP stream", p, 0, func(v view) { scan(s.Flow, v) })
			}
		}
	}
	// TFTP: the request names the file; the data comes back from another
	// port of the server to the requester's port.
	names := map[Flow]string{}
	for _, u := range t.UDP {
		for _, d := range u.Datagrams {
			if name, ok := tftpRequest(d); ok && u.Flow.Dst.Port() == 69 {
				names[u.Flow] = name
			}
		}
	}
	for _, u := range t.UDP {
		if file, ok := tftpFile(u.Datagrams); ok {
			where := "TFTP file"
			for req, name := range names {
				if req.Src == u.Flow.Dst && req.Dst.Addr() == u.Flow.Src.Addr() {
					where += " " + sc.Redact(name)
				}
			}
			expand(where, file, 0, func(v view) { scan(u.Flow, v) })
		}
		for _, d := range u.Datagrams {
			expand("UDP datagram", d, 0, func(v view) { scan(u.Flow, v) })
		}
	}
	return r
}

// Count is how many findings share a kind and a place.
type Count struct {
	Kind    Kind
	Where   string // the place, the server's port instead of the flow
	Count   int    // findings (a secret once per flow)
	Secrets int    // distinct secrets
}

// Counts groups the findings by kind and place (the server's address as
// port only, so devices and runs group together).
func (r Report) Counts() []Count {
	type key struct {
		kind  Kind
		where string
	}
	byKey := map[key]*Count{}
	secrets := map[key]map[string]bool{}
	var order []key
	for _, f := range r.Findings {
		k := key{f.Kind, Place(f)}
		c := byKey[k]
		if c == nil {
			c = &Count{Kind: k.kind, Where: k.where}
			byKey[k] = c
			secrets[k] = map[string]bool{}
			order = append(order, k)
		}
		c.Count++
		secrets[k][f.Digest] = true
	}
	out := make([]Count, 0, len(order))
	for _, k := range order {
		c := *byKey[k]
		c.Secrets = len(secrets[k])
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Where < out[j].Where
	})
	return out
}

// Place is a finding's place without the devices' addresses: the port
// the flow went from or to on the appliance's side, and Where.
func Place(f Finding) string {
	return fmt.Sprintf("%s→%s %s", portOrEphemeral(f.Flow.Src.Port()), portOrEphemeral(f.Flow.Dst.Port()), f.Where)
}

// portOrEphemeral keeps well-known and service ports and hides the
// ephemeral ones (they change with every run).
func portOrEphemeral(p uint16) string {
	if p >= 32768 {
		return "*"
	}
	return fmt.Sprint(p)
}

// Table is the findings by kind and place, for a test log.
func (r Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d packets, %d TCP connections (%d bytes reassembled, %d lost to holes), %d UDP flows: %d findings\n",
		r.Packets, r.Conns, r.Bytes, r.Missing, r.UDPFlows, len(r.Findings))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KIND\tCOUNT\tSECRETS\tWHERE (ports: * ephemeral)\n")
	for _, c := range r.Counts() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", c.Kind, c.Count, c.Secrets, c.Where)
	}
	tw.Flush()
	return b.String()
}
