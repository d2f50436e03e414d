package rest

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// NewKeyResult is the answer to an API key creation: the only time the
// secret is shown.
type NewKeyResult struct {
	apikeys.Info
	SecretKey string `json:"secret_key"`
}

// CreateKey makes an API key from its name, account and role as given:
// the one path of the admin socket (ztpd apikey create) and the REST API.
// The secret is in the answer and nowhere else.
func CreateKey(keys *apikeys.Service, name, account, role string) (NewKeyResult, error) {
	r, err := apikeys.ParseRole(role)
	if err != nil {
		return NewKeyResult{}, err
	}
	info, secret, err := keys.CreateInAccount(name, account, r)
	return NewKeyResult{Info: info, SecretKey: secret}, err
}

// listAPIKeys answers every key's description (never a secret).
func (s *Door) listAPIKeys(c *gin.Context) {
	list, err := s.keys.List()
	if err != nil {
		s.restFail(c, err)
		return
	}
	if list == nil {
		list = []apikeys.Info{}
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, client.Page[apikeys.Info]{Items: list})
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
	httpserve.WriteJSON(c.Writer, http.StatusOK, info)
}
