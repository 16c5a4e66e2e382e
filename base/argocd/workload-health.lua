-- Health of a Kueue Workload (kueue.x-k8s.io/v1beta2, release v0.19.2): the unit Kueue queues and
-- admits for each TrainJob. Argo CD ships none (argo-cd@v3.6.2 resource_customizations).
-- Conditions (kubernetes-sigs/kueue@v0.19.2:apis/kueue/v1beta2/workload_types.go): QuotaReserved,
-- Admitted, Finished (reason Succeeded or Failed), Evicted, Preempted, Requeued, PodsReady;
-- spec.active false deactivates the workload.
--   Finished Succeeded -> Healthy; Finished otherwise -> Degraded; deactivated -> Suspended;
--   evicted -> Progressing (Kueue requeues it); Admitted -> Healthy; waiting for quota ->
--   Suspended; a workload no quota can ever hold (ExceedsMaxQuota, Misconfigured) -> Degraded.
local hs = {}
local current = {}
local pending = nil
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.status == "True" and condition.type ~= nil then
      current[condition.type] = condition
    elseif condition.type == "QuotaReserved" and condition.status == "False" then
      pending = condition
    end
  end
end
local function text(condition, fallback)
  local out = fallback
  if condition.message ~= nil and condition.message ~= "" then
    out = condition.message
  end
  if condition.reason ~= nil and condition.reason ~= "" then
    out = condition.reason .. ": " .. out
  end
  return out
end
if current["Finished"] ~= nil then
  if current["Finished"].reason == "Succeeded" then
    hs.status = "Healthy"
  else
    hs.status = "Degraded"
  end
  hs.message = text(current["Finished"], "The workload finished")
  return hs
end
if obj.spec ~= nil and obj.spec.active == false then
  hs.status = "Suspended"
  hs.message = "The workload is deactivated (spec.active is false)"
  return hs
end
if current["Evicted"] ~= nil then
  hs.status = "Progressing"
  hs.message = text(current["Evicted"], "The workload was evicted") .. "; Kueue requeues it"
  return hs
end
if current["Admitted"] ~= nil then
  hs.status = "Healthy"
  hs.message = text(current["Admitted"], "The workload is admitted")
  return hs
end
if current["QuotaReserved"] ~= nil then
  hs.status = "Progressing"
  hs.message = text(current["QuotaReserved"], "Quota reserved") .. "; waiting for admission checks"
  return hs
end
if pending ~= nil then
  if pending.reason == "ExceedsMaxQuota" or pending.reason == "Misconfigured" then
    hs.status = "Degraded"
  else
    hs.status = "Suspended"
  end
  hs.message = text(pending, "Waiting for quota")
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for Kueue to consider the workload"
return hs
