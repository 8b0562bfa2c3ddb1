-- Argo CD health of tokenfleet.io/ModelDeployment (Lua 5.1, as Argo CD runs it).
-- Degraded: the spec does not fit its pools (Compatible=False: mixed devices, an image for the
-- other device, a CPU replica too small), the canary failed verification (Blocked, or
-- Verified=False with a verifier's reason), or it was rolled back. Suspended: paused by spec.rollout.paused. Progressing:
-- verifying or stepping a canary, replicas starting, or the operator behind the spec.
-- Healthy: Available with no rollout in flight.
local hs = {}
local failures = {
  SignatureInvalid = true, DigestMismatch = true,
  UntrustedSigner = true, ArtifactUnreachable = true, DeviceMismatch = true,
}

local function condition(status, kind)
  if status.conditions == nil then return nil end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then return c end
  end
  return nil
end

local function weight_of(status, name)
  if status.revisions == nil or name == nil or name == "" then return 0 end
  for _, r in ipairs(status.revisions) do
    if r.name == name then return r.weight or 0 end
  end
  return 0
end

local function text(value)
  if value == nil then return "" end
  return tostring(value)
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to report"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to observe generation " .. text(generation)
  return hs
end

local rollout = status.rollout or {}
local canary = text(status.canaryRevision)
local verified = condition(status, "Verified")
local compatible = condition(status, "Compatible")
if compatible ~= nil and compatible.status == "False" then
  hs.status = "Degraded"
  hs.message = "does not fit its pools (" .. text(compatible.reason) .. "): " ..
    text(compatible.message)
  return hs
end
if rollout.phase == "Blocked" then
  hs.status = "Degraded"
  hs.message = "Blocked (" .. text(rollout.reason) .. "): revision " .. canary ..
    " failed verification and gets no traffic. " .. text(rollout.message)
  return hs
end
if verified ~= nil and verified.status == "False" and failures[verified.reason] then
  hs.status = "Degraded"
  hs.message = "artifact not verified (" .. text(verified.reason) .. "): " .. text(verified.message)
  return hs
end
if rollout.phase == "RolledBack" then
  hs.status = "Degraded"
  hs.message = "RolledBack (" .. text(rollout.reason) .. "): " .. text(rollout.message)
  return hs
end
if rollout.phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "rollout paused at step " .. text((rollout.step or 0) + 1) .. ", canary " ..
    canary .. " at " .. text(weight_of(status, canary)) .. "%"
  return hs
end
if rollout.phase == "Verifying" then
  hs.status = "Progressing"
  hs.message = "verifying revision " .. canary .. " before it gets any traffic"
  return hs
end
if rollout.phase == "Progressing" then
  hs.status = "Progressing"
  hs.message = "canary " .. canary .. " at " .. text(weight_of(status, canary)) ..
    "% (step " .. text((rollout.step or 0) + 1) .. ")"
  return hs
end

local available = condition(status, "Available")
if available ~= nil and available.status == "True" then
  hs.status = "Healthy"
  hs.message = text(available.message)
  return hs
end
if available ~= nil and (available.reason == "PoolNotFound" or available.reason == "PoolClaimed") then
  hs.status = "Degraded"
  hs.message = text(available.message)
  return hs
end
hs.status = "Progressing"
hs.message = available and text(available.message) or "waiting for replicas"
return hs
