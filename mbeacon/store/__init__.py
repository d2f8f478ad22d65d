"""The data layer: HDF5 cohort store, readers for real file formats, population priors, simulation."""
