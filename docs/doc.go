// Package docs holds no code: its test keeps the Markdown of the tree
// navigable and short. Every relative link of every Markdown file must
// name a file that exists, and a heading of it when it has an anchor;
// a page of docs/ stays under 300 lines and the README under 120, so that
// each stays a reference and history goes to CHANGELOG.md or git.
package docs
