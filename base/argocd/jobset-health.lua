-- Health of a JobSet (jobset.x-k8s.io/v1alpha2, release v0.12.0), the object Kubeflow Trainer
-- creates for each TrainJob. Argo CD ships none (argo-cd@v3.6.2 resource_customizations).
-- Conditions (kubernetes-sigs/jobset@v0.12.0:api/jobset/v1alpha2/jobset_types.go): Completed
-- (reason AllJobsCompleted), Failed (FailedJobs, ReachedMaxRestarts, ...), Suspended
-- (SuspendedJobs), plus RestartingJobSet and the startup-policy ones; status.restarts and
-- status.replicatedJobsStatus count restarts and pods (pkg/constants/constants.go for reasons).
--   Failed -> Degraded, Completed -> Healthy, suspended -> Suspended, anything else -> Progressing.
local hs = {}
local current = {}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.status == "True" and condition.type ~= nil then
      current[condition.type] = condition
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
if current["Failed"] ~= nil then
  hs.status = "Degraded"
  hs.message = text(current["Failed"], "The JobSet failed")
  return hs
end
if current["Completed"] ~= nil then
  hs.status = "Healthy"
  hs.message = text(current["Completed"], "The JobSet completed")
  return hs
end
if current["Suspended"] ~= nil or (obj.spec ~= nil and obj.spec.suspend == true) then
  hs.status = "Suspended"
  hs.message = "The JobSet is suspended"
  if current["Suspended"] ~= nil then
    hs.message = text(current["Suspended"], hs.message)
  end
  return hs
end
hs.status = "Progressing"
local parts = {}
if obj.status ~= nil and obj.status.restarts ~= nil and obj.status.restarts > 0 then
  table.insert(parts, "restarted " .. tostring(obj.status.restarts) .. " time(s)")
end
if obj.status ~= nil and obj.status.replicatedJobsStatus ~= nil then
  for _, job in ipairs(obj.status.replicatedJobsStatus) do
    table.insert(parts, tostring(job.name) .. ": " .. tostring(job.active or 0) .. " active, " .. tostring(job.ready or 0) .. " ready, " .. tostring(job.succeeded or 0) .. " succeeded, " .. tostring(job.failed or 0) .. " failed")
  end
end
if table.getn(parts) > 0 then
  hs.message = table.concat(parts, "; ")
else
  hs.message = "Waiting for the JobSet controller to create the Jobs"
end
return hs
