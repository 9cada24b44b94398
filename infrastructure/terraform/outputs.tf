output "instance_name" {
  description = "Name of the GPU VM."
  value       = google_compute_instance.run.name
}

output "zone" {
  description = "Zone of the GPU VM."
  value       = google_compute_instance.run.zone
}

output "service_account_email" {
  description = "The VM's own identity (storage access to the output bucket only, log writing, the W&B secret if set)."
  value       = google_service_account.run.email
}

output "run_output_url" {
  description = "Where the run directory is synced during and after the run."
  value       = "gs://${google_storage_bucket.outputs.name}/${var.name}"
}

output "startup_log_command" {
  description = "Command that shows the startup script's progress."
  value       = "gcloud compute instances get-serial-port-output ${google_compute_instance.run.name} --zone ${google_compute_instance.run.zone} --project ${var.project_id}"
}
