{{/*
Names. The fullname is cut at 52 characters: a StatefulSet's pods carry a
controller-revision-hash label of the name plus 11 characters, at most 63.
*/}}
{{- define "ringlimit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "ringlimit.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service: discovery (the --join SRV name) and pod DNS names. */}}
{{- define "ringlimit.headlessName" -}}
{{- printf "%s-headless" (include "ringlimit.fullname" .) }}
{{- end }}

{{- define "ringlimit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ringlimit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ringlimit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ringlimit.labels" -}}
helm.sh/chart: {{ include "ringlimit.chart" . }}
{{ include "ringlimit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* --cluster-size: clusterSize, else replicaCount. */}}
{{- define "ringlimit.clusterSize" -}}
{{- .Values.clusterSize | default .Values.replicaCount | int }}
{{- end }}

{{/* The pod names, comma-separated: what the node certificate must name. */}}
{{- define "ringlimit.podNames" -}}
{{- $full := include "ringlimit.fullname" . }}
{{- $names := list }}
{{- range $i := until (int .Values.replicaCount) }}
{{- $names = append $names (printf "%s-%d" $full $i) }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{- define "ringlimit.tlsSecretName" -}}
{{- .Values.tls.existingSecret | default (printf "%s-tls" (include "ringlimit.fullname" .)) }}
{{- end }}

{{- define "ringlimit.gossipSecretName" -}}
{{- .Values.gossipKey.existingSecret | default (printf "%s-gossip" (include "ringlimit.fullname" .)) }}
{{- end }}

{{- define "ringlimit.adminSecretName" -}}
{{- .Values.adminTokens.existingSecret | default (printf "%s-admin" (include "ringlimit.fullname" .)) }}
{{- end }}

{{- define "ringlimit.policyConfigMapName" -}}
{{- .Values.policy.existingConfigMap | default (printf "%s-policy" (include "ringlimit.fullname" .)) }}
{{- end }}

{{- define "ringlimit.rlsConfigMapName" -}}
{{- .Values.rls.existingConfigMap | default (printf "%s-rls" (include "ringlimit.fullname" .)) }}
{{- end }}

{{/* The node's arguments. */}}
{{- define "ringlimit.args" -}}
- --http=0.0.0.0:8080
- --grpc=0.0.0.0:9090
- --peer=0.0.0.0:9190
- --gossip=0.0.0.0:7946
- --join=_gossip._tcp.{{ include "ringlimit.headlessName" . }}.$(POD_NAMESPACE).svc.{{ .Values.clusterDomain }}
- {{ printf "--cluster-name=%s" (.Values.clusterName | default (include "ringlimit.fullname" .)) | quote }}
- --cluster-size={{ include "ringlimit.clusterSize" . }}
- --drain-delay={{ int .Values.drainDelaySeconds }}s
- --shutdown-timeout={{ int .Values.shutdownTimeoutSeconds }}s
{{- if .Values.tls.enabled }}
- --tls-ca=/etc/ringlimit/tls/ca.crt
{{- if .Values.tls.perPodCerts }}
- --tls-cert=/etc/ringlimit/tls/$(RINGLIMIT_NAME).crt
- --tls-key=/etc/ringlimit/tls/$(RINGLIMIT_NAME).key
{{- else }}
- --tls-cert=/etc/ringlimit/tls/tls.crt
- --tls-key=/etc/ringlimit/tls/tls.key
{{- end }}
{{- else }}
- --insecure
{{- end }}
- --gossip-key-file=/etc/ringlimit/gossip/gossip.key
{{- if .Values.adminTokens.enabled }}
- --admin-token-file=/etc/ringlimit/admin/tokens
{{- end }}
{{- if .Values.policy.enabled }}
- --policy=/etc/ringlimit/policy/policy.yaml
{{- end }}
{{- if .Values.rls.enabled }}
- --rls-config=/etc/ringlimit/rls
{{- end }}
- --data-dir=/var/lib/ringlimit
{{- with .Values.logLevel }}
- --log-level={{ . }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
