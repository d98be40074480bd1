"""Built-in datasets: one plugin file per dataset, with the readers (IDX, MAT), transforms, file
lookup and class folders they share."""
