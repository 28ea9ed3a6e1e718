package console

import "net/http"

// formPage is a page with forms whose buttons each name an action
// (name=action): GET shows it, POST does the action through the API.
type formPage struct {
	// render shows the page with status. After a refusal it shows the
	// refusal and keeps what the form was given; after an action that
	// made a secret, it shows the secret (this once) and an empty form.
	render func(v *visit, status int, secret string)
	// actions are what the page's buttons do.
	actions map[string]action
}

// action does what a form asked, through the API. A refusal is an
// *apiError; the form shows it. The change is read only where the error
// is nil, so an action may return the change it would make together
// with the error of the API request making it.
type action func(v *visit) (change, error)

// change is what an action did: Flash says it. The browser is sent on to
// To (so that reloading the page posts nothing again); with no To, the
// page is shown at once with Secret, made by the action and never shown
// again.
type change struct {
	Flash, To, Secret string
}

// show serves the page's GET.
func (f formPage) show(v *visit) { f.render(v, http.StatusOK, "") }

// post serves the page's POST: the session's CSRF token goes along to
// the API with each request the action makes (see Console.call).
func (f formPage) post(v *visit) {
	act, ok := f.actions[v.form("action")]
	if !ok {
		act = unknownAction
	}
	ch, err := act(v)
	switch {
	case err != nil:
		if ae := v.refused(err); ae != nil {
			f.render(v, ae.Status, "")
		}
	case ch.To == "":
		v.Flash = ch.Flash
		f.render(v, http.StatusCreated, ch.Secret)
	default:
		v.done(ch.To, ch.Flash)
	}
}

// unknownAction answers a post whose action no button of the page names.
func unknownAction(*visit) (change, error) {
	return change{}, badRequest("unknown action", "use a button of the page")
}

// badRequest is the console's own refusal of what a form was given,
// shown as the API's are.
func badRequest(msg, hint string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: msg, Hint: hint}
}
