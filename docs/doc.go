// Package docs holds only tests, the ones that keep the repository's
// Markdown honest (go test ./docs):
//
//   - TestMarkdownLinks (links_test.go): every relative link of every
//     Markdown file of the repository names a file or folder inside it;
//   - TestCatalogue (catalogue_test.go): the violation catalogue,
//     docs/catalogue.md, has a section for exactly the kinds of
//     detector.Kinds(), with their severities, runbooks and spec tests.
//
// The files are listed by git; without git (or outside a checkout) the link
// test skips, unless CI is set, where it fails.
package docs
