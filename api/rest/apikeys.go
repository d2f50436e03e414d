package rest

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// CreateKey makes an API key from its name, account and role as given:
// the one path of the admin socket (ztpd apikey create) and the REST API.
// The secret is in the answer and nowhere else.
func CreateKey(keys *apikeys.Service, name, account, role string) (client.NewAPIKey, error) {
	r, err := apikeys.ParseRole(role)
	if err != nil {
		return client.NewAPIKey{}, err
	}
	info, secret, err := keys.CreateInAccount(name, account, r)
	return client.NewAPIKey{APIKeyInfo: APIKeyOf(info), SecretKey: secret}, err
}

// APIKeyOf is the view of a key the REST API and the admin socket answer.
func APIKeyOf(k apikeys.Info) client.APIKeyInfo {
	return client.APIKeyInfo{APIKey: k.APIKey, Name: k.Name, Account: k.Account, Role: string(k.Role), Created: k.Created}
}

// APIKeysOf is the views of keys, [] for none.
func APIKeysOf(list []apikeys.Info) []client.APIKeyInfo {
	out := make([]client.APIKeyInfo, 0, len(list))
	for _, k := range list {
		out = append(out, APIKeyOf(k))
	}
	return out
}

// listAPIKeys answers every key's description (never a secret).
func (s *Door) listAPIKeys(c *gin.Context) {
	list, err := s.keys.List()
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, client.Page[client.APIKeyInfo]{Items: APIKeysOf(list)})
}

// createAPIKey answers 201 with the new key and its secret, shown once.
func (s *Door) createAPIKey(c *gin.Context) {
	var req struct {
		Name    string `json:"name"`
		Role    string `json:"role"`
		Account string `json:"account"`
	}
	if !bindBody(c, &req) {
		return
	}
	res, err := CreateKey(s.keys, req.Name, req.Account, req.Role)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusCreated, res)
}

// revokeAPIKey deletes a key: requests signed with it, and console
// sessions signed in with it, fail from now on. The last admin key stays.
func (s *Door) revokeAPIKey(c *gin.Context) {
	info, err := s.keys.Revoke(c.Param("key"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, APIKeyOf(info))
}
