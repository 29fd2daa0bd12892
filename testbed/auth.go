package testbed

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// serviceAccountTokenSeconds is the lifetime requested for ServiceAccount
// tokens: longer than any test, and above the API server's 10 minute minimum.
const serviceAccountTokenSeconds = 24 * 60 * 60

// writeCredentials generates the CA, the serving certificate, the
// ServiceAccount key pair and the admin token, and writes them to tb.Dir.
func (tb *Testbed) writeCredentials() error {
	var err error
	if tb.pki, err = newPKI(); err != nil {
		return err
	}
	crt, key, err := tb.pki.serving(tb.servingIPs(), servingNames)
	if err != nil {
		return err
	}
	saKey, saPub, err := serviceAccountKey()
	if err != nil {
		return err
	}
	kcCrt, kcKey, err := tb.pki.client(KubeletClientUser, nil)
	if err != nil {
		return err
	}
	tb.adminToken = randomToken()
	// token,user,uid,"group1,group2" (kube-apiserver --token-auth-file)
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", tb.adminToken, AdminUser, AdminUser)
	for name, data := range map[string][]byte{
		"ca.crt":        tb.pki.caPEM,
		"apiserver.crt": crt,
		"apiserver.key": key,
		"sa.key":        saKey,
		"sa.pub":        saPub,
		"tokens.csv":    []byte(tokens),
		// kube-apiserver's client certificate towards kubelets.
		"apiserver-kubelet-client.crt": kcCrt,
		"apiserver-kubelet-client.key": kcKey,
	} {
		if err := writeFile(filepath.Join(tb.Dir, name), data); err != nil {
			return err
		}
	}
	return nil
}

// ensureKubeletClientBinding lets KubeletClientUser use every kubelet API
// (system:kubelet-api-admin: nodes/proxy, nodes/log, ...): kubelets
// authorize it through the API server (webhook mode), as kubeadm's
// clusters do.
func (tb *Testbed) ensureKubeletClientBinding(ctx context.Context) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed:" + KubeletClientUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: KubeletClientUser}},
	}
	_, err := tb.client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind %s to system:kubelet-api-admin: %w", KubeletClientUser, err)
	}
	return nil
}

func (tb *Testbed) adminAuth() *clientcmdapi.AuthInfo {
	return &clientcmdapi.AuthInfo{Token: tb.adminToken}
}

func (tb *Testbed) certAuth(user string, groups []string) (*clientcmdapi.AuthInfo, error) {
	crt, key, err := tb.pki.client(user, groups)
	if err != nil {
		return nil, err
	}
	return &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}, nil
}

// RestConfigFor returns a client configuration authenticated by a client
// certificate as user, member of groups, and of nothing else: RBAC grants it
// only what a binding for that user or a group grants.
func (tb *Testbed) RestConfigFor(user string, groups ...string) (*rest.Config, error) {
	crt, key, err := tb.pki.client(user, groups)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            tb.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAData: tb.pki.caPEM, CertData: crt, KeyData: key},
	}, nil
}

// KubeconfigFor writes a kubeconfig for user in groups (see RestConfigFor)
// and returns its path.
func (tb *Testbed) KubeconfigFor(user string, groups ...string) (string, error) {
	auth, err := tb.certAuth(user, groups)
	if err != nil {
		return "", err
	}
	return tb.writeKubeconfig("user-"+fileSafe(user)+".kubeconfig", tb.URL(), auth)
}

// ServiceAccountRestConfig returns a client configuration for the
// ServiceAccount namespace/name, creating the ServiceAccount when missing,
// with a token from the TokenRequest API. It authenticates as
// system:serviceaccount:<namespace>:<name>, so it holds exactly what
// RoleBindings and ClusterRoleBindings to that ServiceAccount grant (for
// example a Helm chart's ClusterRole).
func (tb *Testbed) ServiceAccountRestConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	token, err := tb.serviceAccountToken(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            tb.URL(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: tb.pki.caPEM},
	}, nil
}

// ServiceAccountKubeconfig writes a kubeconfig for the ServiceAccount
// namespace/name (see ServiceAccountRestConfig) and returns its path.
func (tb *Testbed) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	token, err := tb.serviceAccountToken(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	file := "sa-" + fileSafe(namespace) + "-" + fileSafe(name) + ".kubeconfig"
	return tb.writeKubeconfig(file, tb.URL(), &clientcmdapi.AuthInfo{Token: token})
}

func (tb *Testbed) serviceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	sas := tb.client.CoreV1().ServiceAccounts(namespace)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := sas.Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ServiceAccount %s/%s: %w", namespace, name, err)
	}
	exp := int64(serviceAccountTokenSeconds)
	tr, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// writeKubeconfig writes a self-contained kubeconfig (certificates inline)
// with one context, "testbed", and returns its path.
func (tb *Testbed) writeKubeconfig(file, server string, auth *clientcmdapi.AuthInfo) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testbed"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: tb.pki.caPEM}
	cfg.AuthInfos["testbed"] = auth
	cfg.Contexts["testbed"] = &clientcmdapi.Context{Cluster: "testbed", AuthInfo: "testbed", Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = "testbed"
	path := filepath.Join(tb.Dir, file)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return path, nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// fileSafe maps a user name such as system:serviceaccount:ns:name to a
// string usable in a file name.
func fileSafe(s string) string { return unsafeChars.ReplaceAllString(s, "_") }
