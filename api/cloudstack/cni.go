package cloudstack

import (
	"encoding/base64"
	"strings"

	"github.com/ztpd/ztpd/internal/clusters"
)

// cniCommands are CloudStack 4.21's CNI configuration commands (user data
// of a kind, in CloudStack's userdata command family). ztpd lets only
// admins register and delete them: a configuration is applied to
// clusters with cluster-admin rights. Every account may list them and
// create clusters with one.
func cniCommands() []*command {
	const javaUserData = "org.apache.cloudstack.api.command.user.userdata."
	return []*command{
		{Name: "registerCniConfiguration", Desc: "Register a CNI configuration (a Kubernetes manifest) to be applied to clusters created with it", Admin: true, Since: "4.21.0",
			JavaClass: javaUserData + "RegisterCniConfigurationCmd",
			Params: []paramDef{
				{"name", "string", true, "the configuration's name"},
				{"cniconfig", "string", true, "the manifest, base64-encoded; parameters appear as {{ ds.meta_data.NAME }}"},
				{"params", "string", false, "the names of the manifest's parameters, comma-separated"},
				{"domainid", "uuid", false, "ignored: ztpd has one domain, ROOT"},
			}, Limits: cniOwnerLimits, Response: cniFields, run: (*Door).csRegisterCNI},
		{Name: "listCniConfiguration", Desc: "List registered CNI configurations", Since: "4.21.0",
			JavaClass: javaUserData + "ListCniConfigurationCmd",
			Params: []paramDef{{"id", "uuid", false, "the configuration's ID"}, {"name", "string", false, "the configuration's name"},
				{"keyword", "string", false, "part of the name"}, {"listall", "boolean", false, "ignored: every account sees every configuration"},
				{"isrecursive", "boolean", false, "ignored"}, {"domainid", "uuid", false, "ignored: ztpd has one domain, ROOT"},
				{"account", "string", false, "ignored: configurations are the appliance's"},
				{"page", "integer", false, "page number, from 1"}, {"pagesize", "integer", false, "items per page (-1: all)"}},
			Limits: cniProjectLimits, Response: cniFields, run: (*Door).csListCNI},
		{Name: "deleteCniConfiguration", Desc: "Delete a CNI configuration no cluster uses", Admin: true, Since: "4.21.0",
			JavaClass: javaUserData + "DeleteCniConfigurationCmd",
			Params: []paramDef{{"id", "uuid", true, "the configuration's ID"},
				{"domainid", "uuid", false, "ignored: ztpd has one domain, ROOT"}},
			Limits: cniOwnerLimits, Response: []string{"success", "displaytext"}, run: (*Door).csDeleteCNI},
	}
}

var cniFields = []string{"id", "name", "account", "accountid", "domain", "domainid", "userdata", "params"}

const whyCNIOwner = "CNI configurations in ztpd are the appliance's, registered by admins and usable by every account"

var (
	cniProjectLimits = []limit{{"projectid", "uuid", "", "not supported: ztpd has no projects",
		never("ztpd has no projects")}}
	cniOwnerLimits = append([]limit{{"account", "string", "", "not supported: " + whyCNIOwner, never(whyCNIOwner)}}, cniProjectLimits...)
)

// csCNI is a cniconfig object: CloudStack's user data response, the
// manifest base64-encoded as CloudStack returns user data.
type csCNI struct {
	Account   string `json:"account"`
	AccountID string `json:"accountid"`
	Domain    string `json:"domain"`
	DomainID  string `json:"domainid"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	Params    string `json:"params,omitempty"`
	UserData  string `json:"userdata"`
}

type cniAnswer struct {
	CNI csCNI `json:"cniconfig"`
}

func (d *Door) renderCNI(c clusters.CNIConfig) csCNI {
	dom := d.clusters.Domain()
	return csCNI{Account: c.Account, AccountID: c.Account, Domain: dom.Name, DomainID: dom.ID, ID: c.ID, Name: c.Name,
		Params: strings.Join(c.Params, ","), UserData: base64.StdEncoding.EncodeToString([]byte(c.Manifest))}
}

func (d *Door) csRegisterCNI(r *csRequest) (any, *csError) {
	c, err := d.clusters.RegisterCNI(r.ctx, r.caller, clusters.CNISpec{Name: r.str("name"), Content: r.str("cniconfig"), Params: r.str("params")})
	if err != nil {
		return nil, domainError(err)
	}
	return cniAnswer{d.renderCNI(c)}, nil
}

func (d *Door) csListCNI(r *csRequest) (any, *csError) {
	page, size, e := paging(r)
	if e != nil {
		return nil, e
	}
	cs, err := d.clusters.ListCNI(r.ctx, r.caller, clusters.CNIFilter{ID: r.str("id"), Name: r.str("name"), Keyword: r.str("keyword")})
	if err != nil {
		return nil, domainError(err)
	}
	items := []csCNI{}
	for _, c := range pageOf(cs, page, size) {
		items = append(items, d.renderCNI(c))
	}
	return listBody("cniconfig", len(cs), items), nil
}

func (d *Door) csDeleteCNI(r *csRequest) (any, *csError) {
	c, err := d.clusters.DeleteCNI(r.ctx, r.caller, r.str("id"))
	if err != nil {
		return nil, domainError(err)
	}
	return jobSuccess{Success: true, DisplayText: "CNI configuration " + c.Name + " deleted"}, nil
}

// cniDetails reads cniconfigdetails in either form CloudStack clients
// send a map: cniconfigdetails[i].NAME=VALUE (cloudstack-go), or
// cniconfigdetails[i].key=NAME with cniconfigdetails[i].value=VALUE. Names
// arrive lowercased (parameter names are); the service matches them to
// the configuration's params without regard to case.
func cniDetails(r *csRequest) map[string]string {
	entries := r.entries("cniconfigdetails")
	if len(entries) == 0 {
		return nil
	}
	out := make(map[string]string, len(entries)) // the request's details, not an answer
	for _, e := range entries {
		k, hasKey := e["key"]
		v, hasValue := e["value"]
		if hasKey && hasValue && len(e) == 2 {
			out[k] = v
			continue
		}
		for k, v := range e {
			out[k] = v
		}
	}
	return out
}
