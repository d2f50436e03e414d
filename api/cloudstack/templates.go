package cloudstack

import (
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters"
)

// templateCommands: listTemplates, so that CloudStack clients can name a
// cluster's node templates (nodetemplates) by the IDs they look up. Every
// loaded profile is a template (clusters.ListTemplates).
func templateCommands() []*command {
	return []*command{
		{Name: "listTemplates", Desc: "List templates: ztpd's loaded profiles, which node templates (nodetemplates) name",
			JavaClass: "org.apache.cloudstack.api.command.user.template.ListTemplatesCmd",
			Params: []paramDef{
				{"templatefilter", "string", true, "featured, executable or all (admins): the loaded profiles; self, selfexecutable, sharedexecutable, community: none (ztpd registers no templates)"},
				{"id", "uuid", false, "the template's ID"},
				{"name", "string", false, "the template's name (the profile's)"},
				{"keyword", "string", false, "part of the name"},
				{"zoneid", "uuid", false, "templates of this zone (ztpd's one zone has them all)"},
				{"isready", "boolean", false, "ignored: every template is ready"},
				{"forcks", "boolean", false, "ignored: every template is for Kubernetes clusters"},
				{"listall", "boolean", false, "ignored: templates are the appliance's"},
				{"account", "string", false, "ignored: templates are the appliance's"},
				{"domainid", "uuid", false, "ignored: ztpd has one domain, ROOT"},
				{"page", "integer", false, "page number, from 1"}, {"pagesize", "integer", false, "items per page (-1: all)"}},
			Limits: []limit{{"projectid", "uuid", "", "not supported: ztpd has no projects", never("ztpd has no projects")}},
			Response: []string{"id", "name", "displaytext", "account", "domain", "domainid", "zoneid", "zonename", "isready",
				"ispublic", "isfeatured", "isextractable", "bootable", "crossZones", "forcks", "status", "templatetype", "ostypename", "ztpdcluster"},
			run: (*Door).csListTemplates},
	}
}

func (d *Door) csListTemplates(r *csRequest) (any, *csError) {
	page, size, e := paging(r)
	if e != nil {
		return nil, e
	}
	ts, err := d.clusters.ListTemplates(r.caller, clusters.TemplateFilter{Filter: r.str("templatefilter"), ID: r.str("id"),
		Name: r.str("name"), Keyword: r.str("keyword"), ZoneID: r.str("zoneid")})
	if err != nil {
		return nil, domainError(err)
	}
	z, dom := d.clusters.Zone(), d.clusters.Domain()
	items := []client.CSTemplate{}
	for _, t := range pageOf(ts, page, size) {
		// The appliance's, as CloudStack's own templates are the system
		// account's: public, featured, ready, never downloaded.
		items = append(items, client.CSTemplate{ID: t.ID, Name: t.Name, DisplayText: t.DisplayText, OSTypeName: t.OSTypeName,
			Account: "system", Domain: dom.Name, DomainID: dom.ID, ZoneID: z.ID, ZoneName: z.Name, IsReady: true, IsPublic: true,
			IsFeatured: true, Bootable: true, ForCKS: true, Status: "Download Complete", TemplateType: "USER", ZTPDCluster: t.Cluster})
	}
	return listBody("template", len(ts), items), nil
}
