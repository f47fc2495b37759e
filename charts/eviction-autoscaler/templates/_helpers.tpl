{{/*
The name of every object: "eviction-autoscaler" whatever the release is called. The product is
one per cluster (its CRD and webhooks are cluster-wide), and `eviction-autoscaler doctor` looks
for the webhook configurations and the Lease by this name.
*/}}
{{- define "ea.fullname" -}}
{{- default .Chart.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ea.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ea.labels" -}}
{{ include "ea.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ea.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ea.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding tls.crt and tls.key. */}}
{{- define "ea.tlsSecretName" -}}
{{- if eq .Values.tls.source "secret" -}}
{{- required "tls.secret.name is required when tls.source is secret" .Values.tls.secret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "ea.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The DNS names the apiserver uses to reach the Service. */}}
{{- define "ea.dnsNames" -}}
{{- $svc := include "ea.fullname" . -}}
- {{ printf "%s.%s.svc" $svc .Release.Namespace }}
- {{ printf "%s.%s.svc.cluster.local" $svc .Release.Namespace }}
{{- end -}}

{{- define "ea.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The serving certificate made by the chart (tls.source=chart), as a dict of base64 PEM
{ca, crt, key}: the existing Secret's pair when there is one (so an upgrade keeps the
caBundle valid), else a new CA and certificate. Call once per render (it is random).
*/}}
{{- define "ea.chartCert" -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "ea.tlsSecretName" .) -}}
{{- $data := dig "data" dict $old -}}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") -}}
{{- dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key") | toJson -}}
{{- else -}}
{{- $svc := include "ea.fullname" . -}}
{{- $days := int .Values.tls.chart.validityDays -}}
{{- $ca := genCA (printf "%s-ca" $svc) $days -}}
{{- $dns := list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) -}}
{{- $leaf := genSignedCert (first $dns) nil $dns $days $ca -}}
{{- dict "ca" ($ca.Cert | b64enc) "crt" ($leaf.Cert | b64enc) "key" ($leaf.Key | b64enc) | toJson -}}
{{- end -}}
{{- end -}}

{{/* ACTIONED_NAMESPACES from a list (the extension's form) or a comma-separated string. */}}
{{- define "ea.actionedNamespaces" -}}
{{- $ns := .Values.controllerConfig.namespaces.actionedNamespaces -}}
{{- if kindIs "slice" $ns -}}{{ join "," $ns }}{{- else -}}{{ toString (default "" $ns) }}{{- end -}}
{{- end -}}

{{- define "ea.validate" -}}
{{- if not (has .Values.tls.source (list "chart" "cert-manager" "secret")) -}}
{{- fail (printf "tls.source must be chart, cert-manager or secret, not %q" .Values.tls.source) -}}
{{- end -}}
{{- if not (has .Values.server.logFormat (list "json" "text")) -}}
{{- fail (printf "server.logFormat must be json or text, not %q" .Values.server.logFormat) -}}
{{- end -}}
{{- $t := int .Values.webhook.timeoutSeconds -}}
{{- if or (lt $t 1) (gt $t 30) -}}
{{- fail (printf "webhook.timeoutSeconds must be 1 to 30, not %v" .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- /* A held eviction is answered within the hold plus one live read (1.5 s); a
     recount reads once before its hold too, so a hold under 1.5 s still takes
     1.5 s + 1.5 s; with no hold, one live read. The apiserver then runs its own
     eviction (0.5 s). Past timeoutSeconds the apiserver gives up on the webhook and,
     failurePolicy Ignore, lets the eviction through unchecked. */ -}}
{{- $hold := toString (default "6s" .Values.controllerConfig.evictionHold) | trim -}}
{{- $holdMs := -1 -}}
{{- if regexMatch "^[0-9]+ms$" $hold -}}{{- $holdMs = int (trimSuffix "ms" $hold) -}}
{{- else if regexMatch "^[0-9]+s$" $hold -}}{{- $holdMs = mul (int (trimSuffix "s" $hold)) 1000 -}}
{{- else if eq $hold "0" -}}{{- $holdMs = 0 -}}
{{- else -}}
{{- fail (printf "controllerConfig.evictionHold must be whole seconds or milliseconds (6s, 2500ms) or 0, not %q, so the chart can check it against webhook.timeoutSeconds" $hold) -}}
{{- end -}}
{{- if gt $holdMs 8000 -}}
{{- fail (printf "controllerConfig.evictionHold %s is over the server's 8s ceiling (EVICTION_HOLD)" $hold) -}}
{{- end -}}
{{- if and (not .Values.controllerConfig.leaderElection) (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "controllerConfig.leaderElection false with replicaCount %v: every replica would surge and revert on its own; use one replica, or leader election" .Values.replicaCount) -}}
{{- end -}}
{{- /* SIGTERM: readyz fails for SHUTDOWN_DELAY (at least the 5s the Lease release
     and the last Events may take, which run inside it), then requests in flight get
     up to REQUEST_TIMEOUT; past the pod's grace the kubelet kills it mid-request.
     Only whole s/ms/m values are checked (the server takes more forms). */ -}}
{{- $sd := int (include "ea.ms" (dict "v" .Values.server.shutdownDelay "default" 5000)) -}}
{{- $rt := int (include "ea.ms" (dict "v" .Values.server.requestTimeout "default" 10000)) -}}
{{- $grace := int .Values.server.terminationGracePeriodSeconds -}}
{{- if and (ge $sd 0) (ge $rt 0) (gt (add (max $sd 5000) $rt 2000) (mul $grace 1000)) -}}
{{- fail (printf "server.shutdownDelay (at least 5s: the Lease release and last Events run inside it) plus server.requestTimeout plus 2s must fit in server.terminationGracePeriodSeconds (%d)" $grace) -}}
{{- end -}}
{{- $longest := 2000 -}}
{{- if gt $holdMs 0 -}}{{- $longest = add (max $holdMs 1500) 2000 -}}{{- end -}}
{{- if gt $longest (mul $t 1000) -}}
{{- fail (printf "controllerConfig.evictionHold %s (at least 1.5s when on) plus 2s (one live read, then the apiserver's own eviction) must fit in webhook.timeoutSeconds (%d)" $hold $t) -}}
{{- end -}}
{{- end -}}

{{/* cert-manager's CA injector fills caBundle from the Certificate. */}}
{{- define "ea.webhookAnnotations" -}}
{{- if eq .Values.tls.source "cert-manager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "ea.tlsSecretName" .) }}
{{- end -}}
{{- end -}}

{{/* What both webhooks share; takes a dict: ctx, path, caBundle. */}}
{{- define "ea.webhookCommon" -}}
{{- $ := .ctx -}}
admissionReviewVersions: [v1]
sideEffects: NoneOnDryRun
failurePolicy: Ignore
timeoutSeconds: {{ int $.Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
clientConfig:
  service:
    name: {{ include "ea.fullname" $ }}
    namespace: {{ $.Release.Namespace }}
    path: {{ .path }}
    port: 443
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
# The product's own namespace is excluded: its pods must stay evictable without it.
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [{{ $.Release.Namespace }}]
{{- end -}}

{{/* A duration as milliseconds: whole ms, s or m, the default when empty, -1 otherwise. */}}
{{- define "ea.ms" -}}
{{- $v := toString .v | trim -}}
{{- if eq $v "" -}}{{ .default }}
{{- else if regexMatch "^[0-9]+ms$" $v -}}{{ trimSuffix "ms" $v }}
{{- else if regexMatch "^[0-9]+s$" $v -}}{{ mul (int (trimSuffix "s" $v)) 1000 }}
{{- else if regexMatch "^[0-9]+m$" $v -}}{{ mul (int (trimSuffix "m" $v)) 60000 }}
{{- else -}}-1
{{- end -}}
{{- end -}}
