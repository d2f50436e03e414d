package kubewatch

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// KubeletClientSigner is the signer of kubelet client certificates: the
// CSRs a kubelet's TLS bootstrap makes.
const KubeletClientSigner = "kubernetes.io/kube-apiserver-client-kubelet"

// CSR is a kubelet client certificate request once it was decided: which
// node it is for and who asked. It is how ztpd ties a Node to the
// credential it issued: a Node's kubelet certificate requested with
// another device's credential is not that device's Node.
type CSR struct {
	Name      string
	NodeName  string // from the request's subject, system:node:<name>
	Requester string // the authenticated user who created it (spec.username)
	Approved  bool
	Denied    bool // denied or failed
	Created   time.Time
}

// CSRSink is an optional part of Sink: when the Sink implements it, each
// watcher also watches kubelet client CSRs (certificatesigningrequests
// get, list and watch, in RBAC()) and reports every approved or denied one
// (again at each relist).
type CSRSink interface {
	CSRSeen(clusterID string, c CSR)
}

// newCSRInformer watches the cluster's kubelet client CSRs.
func (w *watcher) newCSRInformer(c *conn) cache.SharedIndexInformer {
	csrs := c.client.CertificatesV1().CertificateSigningRequests()
	bySigner := fields.OneTermEqualSelector("spec.signerName", KubeletClientSigner).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = bySigner
			return csrs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = bySigner
			return csrs.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c.client),
		&certificatesv1.CertificateSigningRequest{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(obj any) (any, error) {
		if r, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
			r.ManagedFields = nil
			r.Status.Certificate = nil // never read; a CSR decided is all that matters
		}
		return obj, nil
	})
	report := func(obj any) {
		r, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if !ok {
			return
		}
		if csr, ok := csrOf(r); ok && (csr.Approved || csr.Denied) {
			w.m.opt.Sink.(CSRSink).CSRSeen(w.clusterID, csr)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    report,
		UpdateFunc: func(_, obj any) { report(obj) },
	})
	return inf
}

// csrOf reads a kubelet client CSR: ok is false for one that is not a
// request for a system:node: certificate.
func csrOf(r *certificatesv1.CertificateSigningRequest) (CSR, bool) {
	block, _ := pem.Decode(r.Spec.Request)
	if block == nil {
		return CSR{}, false
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return CSR{}, false
	}
	node, ok := strings.CutPrefix(req.Subject.CommonName, "system:node:")
	if !ok || node == "" {
		return CSR{}, false
	}
	out := CSR{Name: r.Name, NodeName: node, Requester: r.Spec.Username, Created: r.CreationTimestamp.Time}
	for _, c := range r.Status.Conditions {
		switch {
		case c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue:
			out.Approved = true
		case (c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed) && c.Status == corev1.ConditionTrue:
			out.Denied = true
		}
	}
	return out, true
}
