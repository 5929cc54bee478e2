// Package kubernetes holds the kustomize base, components and example overlay that
// deploy stackstream on Kubernetes (docs/DEPLOY.md). It has no code: its tests build
// every kustomization, decode each object strictly into the k8s.io/api types and check
// the invariants the manifests promise (privileges, probes, variables, Secrets,
// network policies, autoscaling).
package kubernetes
