;;; infill-test.el --- drive eglot or lsp-mode against infill-lsp in `emacs --batch -Q'  -*- lexical-binding: t -*-

;; Loaded by tests/editors/test_emacs.py before one scenario (`--eval'). What the scenario
;; needs comes from the environment:
;;   INFILL_TEST_SERVER   the server command, a JSON array
;;   INFILL_TEST_OPTIONS  initializationOptions, a JSON object
;;   INFILL_TEST_RESULT   where the scenario's findings are written, as a JSON object
;;   INFILL_TEST_TIMEOUT  seconds a wait may take before the scenario fails
;;   INFILL_TEST_FILE     the Python file the scenario edits
;;   INFILL_TEST_EMACS_DIR  `user-emacs-directory'
;; Errors are not caught: `debug-on-error' prints the backtrace, and Emacs exits non-zero.

(setq debug-on-error t)
;; Emacs's own files (lsp-mode's session, package state) go to the test's folder.
(setq user-emacs-directory (file-name-as-directory (getenv "INFILL_TEST_EMACS_DIR")))
(when (boundp 'native-comp-eln-load-path)  ; the trampolines a backtrace compiles
  (setq native-comp-eln-load-path
        (cons (expand-file-name "eln-cache/" user-emacs-directory)
              (last native-comp-eln-load-path))))
;; The Debian packages (elpa-eglot, elpa-lsp-mode, elpa-company) as `package-initialize'
;; finds them: -Q leaves Debian's own `package-directory-list' unset.
(require 'package)
(setq package-directory-list '("/usr/share/emacs/site-lisp/elpa")
      package-user-dir (expand-file-name "elpa" user-emacs-directory))
(package-initialize)
(require 'json)
(require 'python)
(require 'cl-lib)
(require 'subr-x)

(setq python-indent-guess-indent-offset nil
      make-backup-files nil
      create-lockfiles nil)

(defvar infill-test-server
  (append (json-parse-string (or (getenv "INFILL_TEST_SERVER") "[]")) nil))
(defvar infill-test-options-json (getenv "INFILL_TEST_OPTIONS"))
(defvar infill-test-timeout (string-to-number (or (getenv "INFILL_TEST_TIMEOUT") "300")))
(defvar infill-test-findings nil "The findings so far, an alist written as a JSON object.")

(defun infill-test-note (key value)
  "Record VALUE under KEY (a symbol) and write all findings so far to INFILL_TEST_RESULT."
  (setf (alist-get key infill-test-findings) value)
  (with-temp-file (getenv "INFILL_TEST_RESULT")
    (insert (json-serialize (or infill-test-findings (make-hash-table))
                            :null-object :null :false-object :false))))

(defun infill-test-wait (what probe &optional timeout)
  "Call PROBE until it returns non-nil, letting the processes run in between; its value.
Fails naming WHAT after TIMEOUT (default INFILL_TEST_TIMEOUT) seconds."
  (let ((deadline (+ (float-time) (or timeout infill-test-timeout)))
        value)
    (while (not (setq value (funcall probe)))
      (when (> (float-time) deadline)
        (error "Timed out after %ss waiting for %s" (or timeout infill-test-timeout) what))
      (accept-process-output nil 0.1))
    value))

(defun infill-test-file () (getenv "INFILL_TEST_FILE"))

(defun infill-test-buffer-text () (buffer-substring-no-properties (point-min) (point-max)))

(defun infill-test-open (file)
  "Visit FILE with point at its end, in python-mode."
  (find-file file)
  (goto-char (point-max))
  (unless (derived-mode-p 'python-mode) (error "%s is in %s, not python-mode" file major-mode))
  (current-buffer))

(defun infill-test-finish (original)
  "Note the buffer (text and point) after a completion in a buffer that held ORIGINAL."
  (infill-test-note 'original original)
  (infill-test-note 'buffer (infill-test-buffer-text))
  (infill-test-note 'point (1- (point))))

(defun infill-test-to-json (value)
  "VALUE (a JSON value as eglot or lsp-mode parsed it) as a JSON string."
  (json-serialize value :null-object nil :false-object :json-false))

;;; eglot

(defvar infill-test-completions nil
  "The `textDocument/completion' answers the server gave, newest first (as JSON strings).")

(defun infill-test--record-completion (request server method &rest args)
  "Around `jsonrpc-request': keep each completion answer the server gives."
  (let ((answer (apply request server method args)))
    (when (eq method :textDocument/completion)
      (push (infill-test-to-json answer) infill-test-completions)
      (infill-test-note 'completions (vconcat (reverse infill-test-completions))))
    answer))

(defun infill-test-eglot-connect (file)
  "M-x eglot in FILE's buffer, as configured in `eglot-server-programs'; the server."
  (require 'eglot)
  (setq eglot-server-programs
        `((python-mode . (,@infill-test-server
                          :initializationOptions
                          ,(json-parse-string infill-test-options-json :object-type 'plist)))))
  (advice-add 'jsonrpc-request :around #'infill-test--record-completion)
  (infill-test-open file)
  (call-interactively #'eglot)
  (let ((server (infill-test-wait "eglot to connect" #'eglot-current-server 60)))
    (infill-test-note 'server_pid (process-id (jsonrpc--process server)))
    server))

(defun infill-test-eglot-capf (original)
  "C-M-i (`completion-at-point') until it completes, in a buffer holding ORIGINAL.
The menu answers empty while the suggestion is written: the user asks again. A single
candidate is inserted at once; of several, the user picks the first in *Completions* with RET
there (`choose-completion'). Either way the capf's exit function puts in the item's edit."
  (infill-test-wait
   "completion-at-point to complete"
   (lambda ()
     (let ((inhibit-message t)) (completion-at-point))
     (or (get-buffer-window "*Completions*")
         (not (equal (infill-test-buffer-text) original)))))
  (let ((window (get-buffer-window "*Completions*")))
    (when window
      (with-selected-window window
        (infill-test-note 'candidates_shown (infill-test-buffer-text))
        ;; The first candidate (the list is sorted as the capf says: by sortText).
        (goto-char (or (text-property-not-all (point-min) (point-max) 'mouse-face nil)
                       (error "*Completions* lists no candidate")))
        (choose-completion)))))

;;; company

(defun infill-test-company-complete (original)
  "As a company user: ask for the menu until it has candidates, then RET on the first.
ORIGINAL is the buffer's text before."
  (require 'company)
  (company-mode 1)
  (setq-local company-backends '(company-capf))
  (infill-test-wait
   "company candidates"
   (lambda ()
     (let ((inhibit-message t)) (company-manual-begin))
     company-candidates))
  (infill-test-note 'candidates (vconcat (mapcar #'substring-no-properties company-candidates)))
  (infill-test-note 'company_selection company-selection)
  (company-complete-selection)
  (when (equal (infill-test-buffer-text) original)
    (error "company-complete-selection left the buffer as it was")))

;;; lsp-mode

(defun infill-test--record-lsp-completion (request method &rest args)
  "Around `lsp-request-while-no-input': keep each completion answer the server gives."
  (let ((answer (apply request method args)))
    (when (equal method "textDocument/completion")
      (push (infill-test-to-json answer) infill-test-completions)
      (infill-test-note 'completions (vconcat (reverse infill-test-completions))))
    answer))

(defun infill-test-lsp-connect (file)
  "Register infill-lsp as an lsp-mode client for python-mode and run M-x lsp in FILE."
  (setq lsp-session-file (expand-file-name "lsp-session" user-emacs-directory)
        lsp-client-packages nil            ; only the client registered here
        lsp-enabled-clients '(infill)
        lsp-enable-snippet nil             ; no yasnippet
        lsp-keep-workspace-alive nil
        lsp-enable-file-watchers nil
        lsp-modeline-code-actions-enable nil
        lsp-modeline-diagnostics-enable nil
        lsp-headerline-breadcrumb-enable nil)
  (require 'lsp-mode)
  (require 'lsp-completion)
  (lsp-register-client
   (make-lsp-client
    :new-connection (lsp-stdio-connection (lambda () infill-test-server))
    :major-modes '(python-mode)
    :server-id 'infill
    :add-on? t                          ; beside the user's own Python server
    :initialization-options
    (lambda () (json-parse-string infill-test-options-json :object-type 'hash-table))))
  (advice-add 'lsp-request-while-no-input :around #'infill-test--record-lsp-completion)
  (infill-test-open file)
  ;; The folder is the project root, as a user confirms it on the first M-x lsp.
  (lsp-workspace-folders-add (file-name-directory (expand-file-name file)))
  (lsp)
  (let ((workspace
         (infill-test-wait "lsp-mode to initialize"
                           (lambda ()
                             (cl-find-if (lambda (w) (eq (lsp--workspace-status w) 'initialized))
                                         (lsp-workspaces)))
                           60)))
    (infill-test-note 'server_pid (process-id (lsp--workspace-cmd-proc workspace)))
    workspace))

(defun infill-test-lsp-shutdown (workspace)
  "M-x lsp-workspace-shutdown on WORKSPACE: note how long it took, any error it reported
\(lsp-mode reports a shutdown request that fails or times out and goes on), and how the
server ended."
  (let ((process (lsp--workspace-cmd-proc workspace))
        (start (float-time))
        (report (lambda (format-string &rest args)
                  (infill-test-note 'shutdown_error (apply #'format format-string args)))))
    (advice-add 'lsp--error :before report)
    (unwind-protect (lsp-workspace-shutdown workspace)
      (advice-remove 'lsp--error report))
    (infill-test-note 'shutdown_seconds (- (float-time) start))
    (infill-test-wait "the server to exit" (lambda () (not (process-live-p process))) 5)
    (infill-test-note 'exit (format "%s %s" (process-status process)
                                    (process-exit-status process)))))

(defun infill-test-lsp-stats ()
  "The server's `infill/stats' report, as a JSON string."
  (json-serialize (lsp-request "infill/stats" (make-hash-table))
                  :null-object nil :false-object :json-false))

;;; The scenarios, one per Emacs run

(defun infill-test-eglot-completion-at-point ()
  "eglot, and C-M-i at the end of the file until it completes."
  (infill-test-eglot-connect (infill-test-file))
  (let ((original (infill-test-buffer-text)))
    (infill-test-eglot-capf original)
    (infill-test-finish original)))

(defun infill-test-eglot-company ()
  "eglot with company: M-x company-complete at the end of the file until it lists candidates,
then RET."
  (infill-test-eglot-connect (infill-test-file))
  (let ((original (infill-test-buffer-text)))
    (infill-test-company-complete original)
    (infill-test-finish original)))

(defun infill-test-lsp-company ()
  "lsp-mode with company (as lsp-mode sets it up): complete at the end of the file and RET,
then ask the server its usage counts, then shut it down as M-x lsp-workspace-shutdown does."
  (let ((workspace (infill-test-lsp-connect (infill-test-file)))
        (original (infill-test-buffer-text)))
    (unless (bound-and-true-p company-mode) (error "lsp-mode did not turn company-mode on"))
    (infill-test-company-complete original)
    (infill-test-finish original)
    ;; lsp-mode has run the item's command: the usage counts show it accepted (the test
    ;; judges them; a few seconds for the count to appear, then the shutdown either way).
    (ignore-errors
      (infill-test-wait "the usage counts to show the acceptance"
                        (lambda ()
                          (let ((stats (infill-test-lsp-stats)))
                            (infill-test-note 'stats stats)
                            (string-match-p "\"accepted\":[1-9]" stats)))
                        10))
    (infill-test-lsp-shutdown workspace)))

(defun infill-test-eglot-shutdown-at-once ()
  "eglot connects, and M-x eglot-shutdown follows at once, while the model loads."
  (let* ((server (infill-test-eglot-connect (infill-test-file)))
         (process (jsonrpc--process server)))
    (infill-test-note 'status_before
                      (infill-test-to-json (jsonrpc-request server :infill/status nil)))
    (let ((start (float-time)))
      (condition-case err
          (eglot-shutdown server)
        (error (infill-test-note 'shutdown_error (error-message-string err))))
      (infill-test-note 'shutdown_seconds (- (float-time) start)))
    (infill-test-wait "the server to exit" (lambda () (not (process-live-p process))) 5)
    (infill-test-note 'exit (format "%s %s" (process-status process)
                                    (process-exit-status process)))))

(defun infill-test-lsp-shutdown-at-once ()
  "lsp-mode connects, and M-x lsp-workspace-shutdown follows at once, while the model loads."
  (let ((workspace (infill-test-lsp-connect (infill-test-file))))
    (infill-test-note 'status_before
                      (infill-test-to-json (lsp-request "infill/status" (make-hash-table))))
    (infill-test-lsp-shutdown workspace)))

(provide 'infill-test)
;;; infill-test.el ends here
