package worker

// CheckJobs returns an error wrapping ErrNoJobs, naming the group and how
// to register jobs, when WithJobsRequired was given and no job is
// registered; else nil (see Worker.CheckJobs).
func (s *Spread) CheckJobs() error { return s.tmpl.CheckJobs() }

// noJobs is Run's check of n registered jobs: CheckJobs's error, or, with
// none registered and none required, a warning.
func (s *Spread) noJobs(n int) error {
	if n > 0 {
		return nil
	}
	if err := s.CheckJobs(); err != nil {
		return err
	}
	s.log.Warn(noJobsWarning)
	return nil
}

// Jobs returns the names of the registered jobs, in name order.
func (s *Spread) Jobs() []string { return s.tmpl.Jobs() }
