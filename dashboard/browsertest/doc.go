// Package browsertest drives the rheo dashboard in headless Chromium
// (chromedp): it follows links, submits the action forms, checks what the
// browser shows against the API, checks that hostile stored strings stay
// text, and takes the screenshots in docs/img (with -screenshots).
//
// It is a module of its own so that chromedp never enters the library's
// dependency graph. The browser comes from RHEO_TEST_CHROME or the PATH
// (chromium, chromium-browser, google-chrome); without one the tests skip,
// and fail under CI=true.
package browsertest
